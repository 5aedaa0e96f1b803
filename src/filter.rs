//! Which events a route takes (docs/reference/configuration.md, `filter`):
//! `filter = { "json:/type" = ["invoice.*", "charge.succeeded"] }` — a
//! table of key sources to one pattern or a list of patterns, where `*`
//! matches any run of characters and a list means any of them. Every
//! entry must match; an absent value matches nothing. Compiled when the
//! config is loaded, evaluated on the verified body and headers.

use http::HeaderMap;

use crate::key::{value_of, KeySource};

/// Patterns a filter entry takes, at most.
const MAX_PATTERNS: usize = 100;

/// A compiled filter: every entry must match.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EventFilter {
    entries: Vec<(KeySource, Vec<Glob>)>,
}

/// A pattern: `*` matches any run of characters (none too); everything
/// else matches itself.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Glob(String);

impl Glob {
    fn matches(&self, text: &str) -> bool {
        let mut parts = self.0.split('*');
        let first = parts.next().unwrap_or_default();
        let Some(mut rest) = text.strip_prefix(first) else {
            return false;
        };
        let parts: Vec<&str> = parts.collect();
        let Some((last, middle)) = parts.split_last() else {
            return rest.is_empty(); // no `*`: the whole text
        };
        for part in middle {
            match rest.find(part) {
                Some(at) => rest = &rest[at + part.len()..],
                None => return false,
            }
        }
        rest.len() >= last.len() && rest.ends_with(last)
    }
}

impl EventFilter {
    /// Compile `table`; each problem with the entry (key source) it is
    /// about.
    pub fn compile(table: &toml::Table) -> Result<Self, Vec<(String, String)>> {
        let mut entries = Vec::new();
        let mut problems = Vec::new();
        if table.is_empty() {
            problems.push((
                String::new(),
                "name at least one key source, like \"json:/type\" = \"invoice.*\"".into(),
            ));
        }
        for (source, patterns) in table {
            let compiled =
                KeySource::parse(source).and_then(|source| Ok((source, globs(patterns)?)));
            match compiled {
                Ok(entry) => entries.push(entry),
                Err(problem) => problems.push((source.clone(), problem)),
            }
        }
        match problems.is_empty() {
            true => Ok(EventFilter { entries }),
            false => Err(problems),
        }
    }

    /// Whether the event passes: every entry's source has a value in it
    /// that one of the entry's patterns matches.
    pub fn passes(&self, headers: &HeaderMap, body: &[u8], body_sha256: &str) -> bool {
        self.entries.iter().all(|(source, globs)| {
            let value = value_of(source, headers, body, body_sha256);
            let text = value
                .as_deref()
                .and_then(|value| std::str::from_utf8(value).ok());
            text.is_some_and(|text| globs.iter().any(|glob| glob.matches(text)))
        })
    }
}

/// `json:/type = invoice.* | charge.succeeded, header:stripe-account = acct_1`,
/// as `check` prints it.
impl std::fmt::Display for EventFilter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        for (i, (source, globs)) in self.entries.iter().enumerate() {
            let patterns: Vec<&str> = globs.iter().map(|glob| glob.0.as_str()).collect();
            let and = if i == 0 { "" } else { ", " };
            write!(f, "{and}{source} = {}", patterns.join(" | "))?;
        }
        Ok(())
    }
}

fn globs(value: &toml::Value) -> Result<Vec<Glob>, String> {
    let texts: Vec<&toml::Value> = match value {
        toml::Value::Array(list) => list.iter().collect(),
        single => vec![single],
    };
    if texts.is_empty() || texts.len() > MAX_PATTERNS {
        return Err(format!("give 1 to {MAX_PATTERNS} patterns"));
    }
    (texts.into_iter())
        .map(|text| match text {
            toml::Value::String(text) => Ok(Glob(text.clone())),
            other => Err(format!(
                "patterns are strings (\"invoice.*\"), not {}",
                other.type_str()
            )),
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn globs_match_runs_of_anything() {
        let matches = |pattern: &str, text: &str| Glob(pattern.into()).matches(text);
        assert!(matches("invoice.*", "invoice.paid"));
        assert!(matches("invoice.*", "invoice."));
        assert!(!matches("invoice.*", "invoices.paid"));
        assert!(matches("*.succeeded", "charge.succeeded"));
        assert!(matches("*", ""));
        assert!(matches("a*b*c", "aXbYbc"));
        assert!(!matches("a*b*c", "aXc"));
        assert!(matches("charge.succeeded", "charge.succeeded"));
        assert!(!matches("charge.succeeded", "charge.succeeded.x"));
        assert!(!matches("ab*ba", "aba"), "the ends may not overlap");
    }

    fn filter(text: &str) -> Result<EventFilter, Vec<(String, String)>> {
        EventFilter::compile(&text.parse::<toml::Table>().unwrap())
    }

    #[test]
    fn every_entry_must_match_and_a_list_is_any_of() {
        let filter = filter(
            r#""json:/type" = ["invoice.*", "charge.succeeded"]
               "header:Stripe-Account" = "acct_1""#,
        )
        .unwrap();
        let mut headers = HeaderMap::new();
        headers.insert("stripe-account", "acct_1".parse().unwrap());
        let passes = |headers: &HeaderMap, body: &str| filter.passes(headers, body.as_bytes(), "");
        assert!(passes(&headers, r#"{"type":"invoice.paid"}"#));
        assert!(passes(&headers, r#"{"type":"charge.succeeded"}"#));
        assert!(!passes(&headers, r#"{"type":"charge.failed"}"#));
        assert!(
            !passes(&headers, r#"{"kind":"invoice.paid"}"#),
            "absent matches nothing"
        );
        assert!(!passes(&HeaderMap::new(), r#"{"type":"invoice.paid"}"#));
    }

    #[test]
    fn bad_filters_name_their_entry() {
        let problems = filter(r#""jsn:/type" = "x""#).unwrap_err();
        assert_eq!(problems[0].0, "jsn:/type");
        let problems = filter(r#""json:/type" = 3"#).unwrap_err();
        assert!(
            problems[0].1.contains("patterns are strings"),
            "{problems:?}"
        );
        assert!(filter(r#""json:/type" = []"#).is_err());
        assert!(filter("").is_err());
    }
}
