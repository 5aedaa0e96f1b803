"""The official Stripe SDK (PyPI `stripe`) as the oracle for the stand-in of
Stripe's API in tests/it/reconcile.rs: it lists the account's events from
it, paging with `starting_after` as it pages api.stripe.com, and reads each
item as an Event. Usage: python stripe_events.py BASE KEY SINCE. Prints one
JSON document: the events the SDK paged through, in order."""

import json
import sys

import stripe

base, key, since = sys.argv[1], sys.argv[2], int(sys.argv[3])
client = stripe.StripeClient(key, base_addresses={"api": base}, max_network_retries=0)
listed = client.v1.events.list(params={"limit": 100, "created": {"gte": since}})
events = [
    {
        "id": event.id,
        "type": event.type,
        "created": event.created,
        "event": isinstance(event, stripe.Event),
        "object": event.data.object["object"],
    }
    for event in listed.auto_paging_iter()
]
print(json.dumps(events))
