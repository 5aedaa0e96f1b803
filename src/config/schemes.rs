//! A config's `[[schemes]]`: senders described as data (docs/guide/senders.md, "Senders
//! described as data"), checked where they are written — each error names
//! its entry and field — and made into the profiles its routes name in
//! `[routes.verify] scheme`, beside the built-in ones.

use super::locate::KeyPath;
use super::validate::Validator;
use crate::key::KeySource;
use crate::verify::{check_vector, intern, Profile, RawScheme};

impl Validator<'_> {
    /// The profiles of `raw` (those that are valid).
    pub(super) fn schemes(&mut self, at: &KeyPath, raw: Vec<RawScheme>) -> Vec<&'static Profile> {
        let mut made: Vec<&'static Profile> = Vec::new();
        for (i, scheme) in raw.iter().enumerate() {
            let at = at.index(i);
            let name = &scheme.name;
            let named_well = !name.is_empty()
                && (name.bytes()).all(|b| {
                    b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-' || b == b'_'
                });
            if !named_well {
                self.fail(&at.key("name"), format!("{name:?}: use [a-z0-9_-]+"));
                continue;
            }
            if Profile::named(name).is_some() {
                self.fail(
                    &at.key("name"),
                    format!("{name:?} is a sender hookgate ships: use it as it is, or name yours otherwise"),
                );
                continue;
            }
            if made.iter().any(|profile| profile.name == name) {
                self.fail(&at.key("name"), format!("{name:?} is described twice"));
                continue;
            }
            for (j, source) in scheme.key.iter().flatten().enumerate() {
                if let Err(error) = KeySource::parse(source) {
                    self.fail(&at.key("key").index(j), error);
                }
            }
            let profile = match intern(scheme, Profile::named) {
                Ok(profile) => profile,
                Err((field, message)) => {
                    let place = field
                        .split('.')
                        .fold(at.clone(), |place, part| place.key(part));
                    self.fail(&place, message);
                    continue;
                }
            };
            for (j, vector) in scheme.vectors.iter().enumerate() {
                if let Err(error) = check_vector(profile, vector) {
                    self.fail(&at.key("vectors").index(j), error);
                }
            }
            made.push(profile);
        }
        made
    }
}
