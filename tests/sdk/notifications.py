"""Checks a notification hookgate sent with the vendor's own SDK, for
tests/it/notify.rs: `python notifications.py KIND` reads one JSON object on
stdin (`body`, `headers`, `secret`) and exits 0 when the SDK accepts it.

- slack: slack_sdk's Block Kit models parse every block, validate each
  (lengths, required fields), and give back exactly what was sent.
- webhook: the standardwebhooks library verifies the signature, and
  refuses the same message with one byte of the body changed.
"""

import json
import sys


def slack(message):
    from slack_sdk.models.blocks import Block

    sent = json.loads(message["body"])
    assert sent["text"], "a fallback text for notifications"
    blocks = Block.parse_all(sent["blocks"])
    assert len(blocks) == len(sent["blocks"]) <= 50, len(blocks)
    for block in blocks:
        block.validate_json()
    assert [block.to_dict() for block in blocks] == sent["blocks"], "a block field slack_sdk does not know"


def webhook(message):
    from standardwebhooks.webhooks import Webhook, WebhookVerificationError

    hook = Webhook(message["secret"])
    payload = hook.verify(message["body"], message["headers"])
    assert payload["type"] == "hookgate.notices", payload
    tampered = message["body"].replace("hookgate.notices", "hookgate.noticez")
    try:
        hook.verify(tampered, message["headers"])
    except WebhookVerificationError:
        return
    raise AssertionError("a changed body verified")


if __name__ == "__main__":
    {"slack": slack, "webhook": webhook}[sys.argv[1]](json.load(sys.stdin))
    print("ok")
