//! Scalar value parsing shared by every config section: `${VAR}`
//! interpolation and durations (`"250ms"`, `"30s"`, `"5m"`, `"72h"`, `"30d"`).

use std::time::Duration;

/// Replace every `${NAME}` with the environment variable `NAME`.
///
/// `lookup` is injected so tests never touch the process environment. An
/// unset variable is an error naming it; a `$` not followed by `{` is literal.
pub fn interpolate(input: &str, lookup: &dyn Fn(&str) -> Option<String>) -> Result<String, String> {
    let mut out = String::with_capacity(input.len());
    let mut rest = input;
    while let Some(start) = rest.find("${") {
        out.push_str(&rest[..start]);
        let after = &rest[start + 2..];
        let end = after
            .find('}')
            .ok_or_else(|| format!("unterminated `${{` in {input:?}"))?;
        let name = &after[..end];
        let valid = !name.is_empty()
            && !name.starts_with(|c: char| c.is_ascii_digit())
            && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_');
        if !valid {
            return Err(format!("`${{{name}}}` is not a valid variable name"));
        }
        let value =
            lookup(name).ok_or_else(|| format!("environment variable `{name}` is not set"))?;
        out.push_str(&value);
        rest = &after[end + 1..];
    }
    out.push_str(rest);
    Ok(out)
}

/// Parse `"250ms"`, `"30s"`, `"5m"`, `"72h"` or `"30d"`.
pub fn parse_duration(input: &str) -> Result<Duration, String> {
    let text = input.trim();
    let split = text
        .find(|c: char| !c.is_ascii_digit())
        .ok_or_else(|| format!("{input:?} has no unit (use ms, s, m, h or d)"))?;
    let (number, unit) = text.split_at(split);
    let n: u64 = number
        .parse()
        .map_err(|_| format!("{input:?} is not a duration like \"30s\""))?;
    let millis_per_unit: u64 = match unit {
        "ms" => 1,
        "s" => 1_000,
        "m" => 60_000,
        "h" => 3_600_000,
        "d" => 86_400_000,
        _ => {
            return Err(format!(
                "{input:?}: unknown unit {unit:?} (use ms, s, m, h or d)"
            ))
        }
    };
    n.checked_mul(millis_per_unit)
        .map(Duration::from_millis)
        .ok_or_else(|| format!("{input:?} is too long"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env(name: &str) -> Option<String> {
        match name {
            "SECRET" => Some("s3cr3t".into()),
            "EMPTY" => Some(String::new()),
            _ => None,
        }
    }

    #[test]
    fn interpolates_variables() {
        assert_eq!(interpolate("a-${SECRET}-b", &env).unwrap(), "a-s3cr3t-b");
        assert_eq!(interpolate("${SECRET}${EMPTY}", &env).unwrap(), "s3cr3t");
        assert_eq!(interpolate("cost $5", &env).unwrap(), "cost $5");
        assert!(interpolate("${MISSING}", &env)
            .unwrap_err()
            .contains("`MISSING`"));
        assert!(interpolate("${OPEN", &env)
            .unwrap_err()
            .contains("unterminated"));
        assert!(interpolate("${1X}", &env).is_err());
    }

    #[test]
    fn parses_durations() {
        assert_eq!(parse_duration("250ms").unwrap(), Duration::from_millis(250));
        assert_eq!(parse_duration("30s").unwrap(), Duration::from_secs(30));
        assert_eq!(parse_duration("5m").unwrap(), Duration::from_secs(300));
        assert_eq!(
            parse_duration("72h").unwrap(),
            Duration::from_secs(72 * 3600)
        );
        assert_eq!(
            parse_duration("30d").unwrap(),
            Duration::from_secs(30 * 86400)
        );
        for bad in ["30", "s", "3.5s", "10x", "-1s", ""] {
            assert!(parse_duration(bad).is_err(), "{bad}");
        }
    }
}
