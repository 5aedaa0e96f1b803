//! The validator core: turns raw values into typed ones, and collects every
//! problem with its location instead of stopping at the first. Each method
//! returns a usable placeholder on error so validation can go on. The
//! sections (`server`, `store`, `routes`) build on these.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use http::StatusCode;

use super::locate::{line_col, KeyPath, Locator};
use super::value::{interpolate, parse_bytes};
use super::Problem;
use crate::cidr::Cidr;
use crate::clock::parse_duration;

/// Collects problems while turning raw sections into settings. Each method
/// returns a usable placeholder on error so validation can continue and
/// report everything at once.
pub(super) struct Validator<'a> {
    file: String,
    text: &'a str,
    locator: Locator,
    env: &'a dyn Fn(&str) -> Option<String>,
    /// Files the config reads besides itself (`${file:…}` secrets, TLS
    /// certificates and keys, CA bundles): a change to any is a reload.
    files: Vec<PathBuf>,
    problems: Vec<Problem>,
    warnings: Vec<String>,
    /// The config's own `[[schemes]]`, once read: what a route's `scheme`
    /// may name beside the built-in senders.
    pub(super) schemes: Vec<&'static crate::verify::Profile>,
}

/// The longest duration any setting accepts.
const MAX_DURATION: Duration = Duration::from_secs(3650 * 86_400);

impl<'a> Validator<'a> {
    pub fn new(path: &Path, text: &'a str, env: &'a dyn Fn(&str) -> Option<String>) -> Self {
        Self {
            file: path.display().to_string(),
            text,
            locator: Locator::new(text),
            env,
            files: Vec::new(),
            problems: Vec::new(),
            warnings: Vec::new(),
            schemes: Vec::new(),
        }
    }

    /// Everything wrong, everything risky, and every file read.
    pub fn finish(self) -> (Vec<Problem>, Vec<String>, Vec<PathBuf>) {
        (self.problems, self.warnings, self.files)
    }

    /// A file the config reads, to be watched.
    pub fn read_file(&mut self, path: &Path) {
        if !self.files.iter().any(|known| known == path) {
            self.files.push(path.to_owned());
        }
    }

    /// A legal but risky setting, for `check` to print and `run` to log.
    pub fn warn(&mut self, warning: String) {
        self.warnings.push(warning);
    }

    /// A problem at a byte offset of the file (a TOML syntax error).
    pub fn problem_at_offset(&self, offset: usize, message: String) -> Problem {
        let key = self.locator.path_at(offset);
        self.problem_at(offset, &key, message)
    }

    fn problem_at(&self, offset: usize, key: &KeyPath, message: String) -> Problem {
        let (line, column) = line_col(self.text, offset);
        Problem {
            file: self.file.clone(),
            line,
            column,
            key: key.to_string(),
            message,
        }
    }

    pub fn fail(&mut self, key: &KeyPath, message: impl Into<String>) {
        let offset = self.locator.span_of(key).map_or(0, |span| span.start);
        let problem = self.problem_at(offset, key, message.into());
        self.problems.push(problem);
    }

    /// Expand `${VAR}`s; on error record it and return `None`.
    pub fn string(&mut self, key: &KeyPath, raw: &str) -> Option<String> {
        let mut files = Vec::new();
        let value = interpolate(raw, self.env, &mut files);
        for file in files {
            self.read_file(&file);
        }
        match value {
            Ok(value) => Some(value),
            Err(message) => {
                self.fail(key, message);
                None
            }
        }
    }

    pub fn duration(&mut self, key: &KeyPath, raw: Option<&String>, default: Duration) -> Duration {
        let Some(raw) = raw else { return default };
        let Some(text) = self.string(key, raw) else {
            return default;
        };
        match parse_duration(&text) {
            Ok(d) if d.is_zero() => {
                self.fail(key, "must be greater than zero");
                default
            }
            Ok(d) if d > MAX_DURATION => {
                // Far beyond any sender's horizon, and near where "now +
                // duration" stops fitting the stores' millisecond clocks.
                self.fail(key, "must be at most 3650d (ten years)");
                default
            }
            Ok(d) => d,
            Err(message) => {
                self.fail(key, message);
                default
            }
        }
    }

    /// A size in bytes (`"1GiB"`, docs/guide/async-delivery.md, "Asynchronous delivery"); `"0"`
    /// is none.
    pub fn bytes(&mut self, key: &KeyPath, raw: Option<&String>, default: u64) -> u64 {
        let Some(raw) = raw else { return default };
        let Some(text) = self.string(key, raw) else {
            return default;
        };
        parse_bytes(&text).unwrap_or_else(|| {
            self.fail(
                key,
                format!(
                    "{text:?} is not a size: write it like \"1GiB\", \"512MiB\" or \"0\" (none)"
                ),
            );
            default
        })
    }

    /// A duration that may be `"0s"` (off).
    pub fn duration_or_zero(
        &mut self,
        key: &KeyPath,
        raw: Option<&String>,
        default: Duration,
    ) -> Duration {
        let Some(raw) = raw else { return default };
        if parse_duration(raw).is_ok_and(|duration| duration.is_zero()) {
            return Duration::ZERO;
        }
        self.duration(key, Some(raw), default)
    }

    /// An HTTP status within `allowed`, 202 when not set (or wrong, after
    /// reporting `message`).
    pub fn status(
        &mut self,
        key: &KeyPath,
        raw: Option<u64>,
        allowed: std::ops::RangeInclusive<u64>,
        message: &str,
    ) -> StatusCode {
        match raw.unwrap_or(202) {
            code if allowed.contains(&code) => {
                StatusCode::from_u16(code as u16).expect("within 200..=599")
            }
            _ => {
                self.fail(key, message);
                StatusCode::ACCEPTED
            }
        }
    }

    pub fn size(&mut self, key: &KeyPath, raw: Option<u64>, default: u64, max: u64) -> usize {
        let value = raw.unwrap_or(default);
        if value == 0 || value > max {
            self.fail(key, format!("must be between 1 and {max}"));
            return default as usize;
        }
        value as usize
    }

    /// A list of address ranges (`10.0.0.0/8`, `2001:db8::/32`, a bare
    /// address), each problem reported at its index.
    pub fn cidrs(&mut self, key: &KeyPath, raw: &[String]) -> Vec<Cidr> {
        raw.iter()
            .enumerate()
            .filter_map(|(i, text)| {
                let at = key.index(i);
                let text = self.string(&at, text)?;
                text.parse()
                    .map_err(|message: String| self.fail(&at, message))
                    .ok()
            })
            .collect()
    }

    pub fn addr(&mut self, key: &KeyPath, raw: &str) -> SocketAddr {
        let fallback = SocketAddr::from(([127, 0, 0, 1], 0));
        let Some(text) = self.string(key, raw) else {
            return fallback;
        };
        text.parse().unwrap_or_else(|_| {
            self.fail(
                key,
                format!("{text:?} is not a socket address like \"0.0.0.0:8443\""),
            );
            fallback
        })
    }

    pub fn choice<T: Copy>(
        &mut self,
        key: &KeyPath,
        raw: Option<&String>,
        options: &[(&str, T)],
        default: T,
    ) -> T {
        let Some(raw) = raw else { return default };
        let Some(text) = self.string(key, raw) else {
            return default;
        };
        if let Some((_, value)) = options.iter().find(|(name, _)| *name == text) {
            return *value;
        }
        let names: Vec<String> = options.iter().map(|(n, _)| format!("{n:?}")).collect();
        self.fail(key, format!("{text:?} is not one of {}", names.join(", ")));
        default
    }

    pub fn identifier(&mut self, key: &KeyPath, raw: &str) -> String {
        let value = self.string(key, raw).unwrap_or_default();
        let ok = !value.is_empty()
            && value
                .bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_' || b == b'-');
        if !ok {
            self.fail(key, format!("{value:?} must match [a-z0-9_-]+"));
        }
        value
    }
}
