//! A description made a [`Profile`]: its key, retention, retries and the
//! flags the rest of hookgate reads, described or built on a scheme of
//! code (`builds_on`), and kept once per distinct description.

use std::collections::HashMap;
use std::sync::{LazyLock, Mutex};
use std::time::Duration;

use super::{duration, refuse, Described, Piece, RawScheme, Refusal};
use crate::key::OnMissingKey;
use crate::verify::{Profile, DAY};

/// The [`Profile`] of `raw`: described, or built on `base` (a scheme of
/// code, looked up by its name). Leaked, as every profile lives for the
/// process: a config's schemes are kept once per distinct description (see
/// [`intern`]).
pub fn profile(
    raw: &RawScheme,
    base: impl Fn(&str) -> Option<&'static Profile>,
) -> Result<Profile, Refusal> {
    let leak = |text: &str| -> &'static str { Box::leak(text.to_owned().into_boxed_str()) };
    let default_key: &'static [&'static str] = match &raw.key {
        Some(sources) => Box::leak(sources.iter().map(|s| leak(s)).collect()),
        None => &[],
    };
    let retention = (raw.retention.as_deref())
        .map(|text| duration("retention", text))
        .transpose()?;
    let retry_horizon = (raw.retry_horizon.as_deref())
        .map(|text| duration("retry_horizon", text))
        .transpose()?;
    let on_missing_key = match raw.on_missing_key.as_deref() {
        None | Some("reject") => None,
        Some("forward") => Some(OnMissingKey::Forward),
        Some(other) => {
            let why = format!("{other:?} is not \"reject\" or \"forward\"");
            return Err(refuse("on_missing_key", why));
        }
    };
    if let Some(name) = &raw.builds_on {
        let base = base(name)
            .filter(|base| base.described.is_none())
            .ok_or_else(|| refuse("builds_on", format!("{name:?} is not a scheme of code")))?;
        for (field, given) in [
            ("algorithm", raw.algorithm.is_some()),
            ("signature", raw.signature.is_some()),
            ("signed", raw.signed.is_some()),
            ("timestamp", raw.timestamp.is_some()),
            ("handshake", raw.handshake.is_some()),
        ] {
            if given {
                return Err(refuse(field, format!("comes from builds_on = {name:?}")));
            }
        }
        return Ok(Profile {
            name: leak(&raw.name),
            default_key: if raw.key.is_some() {
                default_key
            } else {
                base.default_key
            },
            retry_horizon: retry_horizon.or(base.retry_horizon),
            default_retention: retention.unwrap_or(base.default_retention),
            replay_guard: raw.replay_guard.unwrap_or(base.replay_guard),
            retries_change_body: raw.retries_change_body.unwrap_or(base.retries_change_body),
            retries_itself: raw.retries_itself.unwrap_or(base.retries_itself),
            on_missing_key: on_missing_key.unwrap_or(base.on_missing_key),
            ..base.clone()
        });
    }
    let described: &'static Described = Box::leak(Box::new(Described::from_raw(raw)?));
    let signed_headers: Vec<&'static str> = (described.signed_headers())
        .map(|name| leak(name.as_str()))
        .collect();
    // Without a signed time or id, a captured body can be sent again under
    // a fresh key from an unsigned header.
    let unsigned_key = default_key.iter().any(|source| {
        (source.to_ascii_lowercase().strip_prefix("header:"))
            .is_some_and(|name| !signed_headers.contains(&name.trim()))
    });
    Ok(Profile {
        name: leak(&raw.name),
        default_key,
        retry_horizon,
        default_retention: retention.unwrap_or(Duration::from_secs(7 * DAY)),
        replay_guard: (raw.replay_guard).unwrap_or(described.timestamp.is_none() && unsigned_key),
        timestamped: described.timestamp.is_some(),
        on_missing_key: on_missing_key.unwrap_or(OnMissingKey::Reject),
        signed_headers: Box::leak(signed_headers.into_boxed_slice()),
        signs_url: described.signed.contains(&Piece::Url),
        retries_change_body: raw.retries_change_body.unwrap_or(false),
        retries_itself: raw.retries_itself.unwrap_or(true),
        fetches_key: described.key_url.is_some(),
        described: Some(described),
        build: |_| Err("a described scheme is built from its description".into()),
    })
}

/// The profile of a config's `raw` scheme, made once per distinct
/// description for the life of the process: a reload of the same config
/// finds the one it made before instead of leaking another.
pub fn intern(
    raw: &RawScheme,
    base: impl Fn(&str) -> Option<&'static Profile>,
) -> Result<&'static Profile, Refusal> {
    static MADE: LazyLock<Mutex<HashMap<String, &'static Profile>>> = LazyLock::new(Mutex::default);
    let mut written = raw.clone();
    written.vectors.clear();
    let identity = format!("{written:?}");
    if let Some(made) = MADE.lock().expect("poisoned").get(&identity) {
        return Ok(made);
    }
    let made: &'static Profile = Box::leak(Box::new(profile(raw, base)?));
    MADE.lock().expect("poisoned").insert(identity, made);
    Ok(made)
}
