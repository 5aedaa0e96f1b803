//! A description's signed-content template (`signed = "…"`): the pieces a
//! signature covers, in order, read from `{body}`, `{header:NAME}`,
//! `{url}`, `{timestamp}`, `{crc32:body}`, `{param:NAME}` and the literal
//! text between them.

use http::HeaderName;

/// What a description's signature covers, in order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Piece {
    Body,
    Header(HeaderName),
    Url,
    /// The signed timestamp, wherever the description reads it.
    Timestamp,
    /// The CRC-32 of the body, in decimal (PayPal's): no cryptographic
    /// digest — see docs/guide/senders.md, "Keys fetched from the sender".
    Crc32Body,
    /// A value the route gives in `params` (PayPal's webhook id).
    Param(String),
    Literal(String),
}

/// `{body}`, `{header:NAME}`, `{url}`, `{timestamp}`, `{crc32:body}`,
/// `{param:NAME}` and literal text between them.
pub fn parse_template(text: &str) -> Result<Vec<Piece>, String> {
    let mut pieces = Vec::new();
    let mut rest = text;
    while !rest.is_empty() {
        let Some(open) = rest.find('{') else {
            pieces.push(Piece::Literal(rest.to_owned()));
            break;
        };
        if open > 0 {
            pieces.push(Piece::Literal(rest[..open].to_owned()));
        }
        let close =
            (rest[open..].find('}')).ok_or_else(|| format!("{text:?}: a `{{` is never closed"))?;
        let inner = &rest[open + 1..open + close];
        pieces.push(match inner {
            "body" => Piece::Body,
            "url" => Piece::Url,
            "timestamp" => Piece::Timestamp,
            "crc32:body" => Piece::Crc32Body,
            _ => match (inner.strip_prefix("header:"), inner.strip_prefix("param:")) {
                (Some(name), _) => Piece::Header(
                    HeaderName::from_bytes(name.as_bytes())
                        .map_err(|_| format!("{text:?}: {name:?} is not a header name"))?,
                ),
                (_, Some(name))
                    if !name.is_empty()
                        && (name.bytes()).all(|b| b.is_ascii_lowercase() || b == b'_') =>
                {
                    Piece::Param(name.to_owned())
                }
                _ => {
                    return Err(format!(
                        "{text:?}: {{{inner}}} is not {{body}}, {{header:NAME}}, {{url}}, \
                         {{timestamp}}, {{crc32:body}} or {{param:name}}"
                    ))
                }
            },
        });
        rest = &rest[open + close + 1..];
    }
    if !pieces.contains(&Piece::Body) && !pieces.contains(&Piece::Crc32Body) {
        return Err(format!("{text:?} does not sign {{body}}"));
    }
    Ok(pieces)
}
