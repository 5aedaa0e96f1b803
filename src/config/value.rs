//! Scalar value parsing shared by every config section: `${VAR}` and
//! `${file:/path}` interpolation, and durations (`"250ms"`, `"30s"`, `"5m"`,
//! `"72h"`, `"30d"`).

use std::path::{Path, PathBuf};

/// Replace every `${NAME}` with the environment variable `NAME`, and every
/// `${file:/absolute/path}` with that file's content (one trailing newline
/// dropped) — a mounted Kubernetes Secret, a systemd credential — read
/// afresh at every load, so a reload picks up a rotated file.
///
/// `lookup` is injected so tests never touch the process environment. An
/// unset variable or an unreadable file is an error naming it; a `$` not
/// followed by `{` is literal. The files read are pushed to `files`.
pub fn interpolate(
    input: &str,
    lookup: &dyn Fn(&str) -> Option<String>,
    files: &mut Vec<PathBuf>,
) -> Result<String, String> {
    let mut out = String::with_capacity(input.len());
    let mut rest = input;
    while let Some(start) = rest.find("${") {
        out.push_str(&rest[..start]);
        let after = &rest[start + 2..];
        let end = after
            .find('}')
            .ok_or_else(|| format!("unterminated `${{` in {input:?}"))?;
        let name = &after[..end];
        if let Some(path) = name.strip_prefix("file:") {
            out.push_str(&read_secret_file(Path::new(path))?);
            files.push(PathBuf::from(path));
            rest = &after[end + 1..];
            continue;
        }
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

/// The content of a `${file:…}` reference.
fn read_secret_file(path: &Path) -> Result<String, String> {
    if !path.is_absolute() {
        return Err(format!(
            "`${{file:{}}}` needs an absolute path",
            path.display()
        ));
    }
    let text = std::fs::read_to_string(path)
        .map_err(|error| format!("cannot read {}: {error}", path.display()))?;
    let text = text.strip_suffix('\n').unwrap_or(&text);
    Ok(text.strip_suffix('\r').unwrap_or(text).to_owned())
}

/// Parse a rate like `"50/s"`, `"300/m"` or `"10/h"` (at most 1,000,000
/// per unit): events a second.
pub fn parse_rate(text: &str) -> Option<f64> {
    let (count, per) = text.split_once('/')?;
    let count: f64 = count.trim().parse().ok()?;
    let seconds = match per.trim() {
        "s" => 1.0,
        "m" => 60.0,
        "h" => 3600.0,
        _ => return None,
    };
    let per_second = count / seconds;
    (count.is_finite() && count <= 1e6 && per_second >= MIN_RATE).then_some(per_second)
}

/// Parse a size like `"1GiB"`, `"512MiB"`, `"64KB"` or `"1000"` (bytes):
/// binary units `KiB`, `MiB`, `GiB`, `TiB`; decimal `KB`, `MB`, `GB`,
/// `TB`; `B` or none for bytes.
pub fn parse_bytes(text: &str) -> Option<u64> {
    let text = text.trim();
    let split = text
        .find(|c: char| !c.is_ascii_digit())
        .unwrap_or(text.len());
    let (number, unit) = text.split_at(split);
    let number: u64 = number.parse().ok()?;
    let unit: u64 = match unit.trim() {
        "" | "B" => 1,
        "KB" => 1_000,
        "MB" => 1_000_000,
        "GB" => 1_000_000_000,
        "TB" => 1_000_000_000_000,
        "KiB" => 1 << 10,
        "MiB" => 1 << 20,
        "GiB" => 1 << 30,
        "TiB" => 1 << 40,
        _ => return None,
    };
    number.checked_mul(unit)
}

/// The slowest rate taken anywhere (`upstream_rate`, a bulk action's
/// `rate`): one an hour. Slower is a mistake, and its waits would not fit
/// a timer.
pub const MIN_RATE: f64 = 1.0 / 3600.0;

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

    fn expand(input: &str) -> Result<String, String> {
        interpolate(input, &env, &mut Vec::new())
    }

    #[test]
    fn interpolates_variables() {
        assert_eq!(expand("a-${SECRET}-b").unwrap(), "a-s3cr3t-b");
        assert_eq!(expand("${SECRET}${EMPTY}").unwrap(), "s3cr3t");
        assert_eq!(expand("cost $5").unwrap(), "cost $5");
        assert!(expand("${MISSING}").unwrap_err().contains("`MISSING`"));
        assert!(expand("${OPEN").unwrap_err().contains("unterminated"));
        assert!(expand("${1X}").is_err());
    }

    #[test]
    fn reads_secret_files_and_names_them() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("stripe");
        std::fs::write(&path, "whsec_from_file\n").unwrap();
        let mut files = Vec::new();
        let text = format!("k-${{file:{}}}-${{SECRET}}", path.display());
        assert_eq!(
            interpolate(&text, &env, &mut files).unwrap(),
            "k-whsec_from_file-s3cr3t",
            "one trailing newline dropped"
        );
        assert_eq!(files, vec![path.clone()]);
        std::fs::write(&path, "two\r\n").unwrap();
        assert_eq!(
            expand(&format!("${{file:{}}}", path.display())).unwrap(),
            "two"
        );
        let missing = expand(&format!("${{file:{}/nope}}", dir.path().display()));
        assert!(missing.unwrap_err().contains("cannot read"));
        assert!(expand("${file:relative/path}")
            .unwrap_err()
            .contains("absolute path"));
    }
}
