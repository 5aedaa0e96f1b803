//! What a description verifies, in one line of the catalogue
//! (`hookgate check --senders`, docs/reference/senders.md).

use super::{Described, Layout, Piece, Signer, Stamp};
use crate::verify::Encoding;

impl Described {
    /// What is verified, in a line of the catalogue: `Mux-Signature:
    /// t=<timestamp>,v1=<hex>`, HMAC-SHA256 of `{timestamp}.{body}`; ….
    pub fn describe(&self) -> String {
        let signer = self.signer.title();
        let encoding = match self.encoding {
            Encoding::Hex => "hex",
            Encoding::Base64 => "base64",
            Encoding::Base64Url => "base64url",
            Encoding::Plain => "secret",
        };
        let one = format!("{}<{encoding}>", self.prefix);
        let stamp = |default: &str| match &self.timestamp {
            Some((Stamp::Pair(name), _)) => format!("{name}=<timestamp>"),
            _ => default.to_owned(),
        };
        let header = match &self.layout {
            Layout::Whole => one,
            Layout::Pairs { name, separator } => {
                let sep = separator.chars().next().unwrap_or(',');
                match &self.timestamp {
                    Some((Stamp::Pair(_), _)) => format!("{}{sep}{name}={one}", stamp("")),
                    _ => format!("{name}={one}"),
                }
            }
            Layout::List { separator } => {
                let sep = separator.chars().next().unwrap_or(',');
                match &self.timestamp {
                    Some((Stamp::First, _)) => format!("<timestamp>{sep}{one}[{sep}…]"),
                    _ => format!("{one}[{sep}…]"),
                }
            }
        };
        let signed: String = (self.signed.iter())
            .map(|piece| match piece {
                Piece::Body => "{body}".to_owned(),
                Piece::Url => "{url}".to_owned(),
                Piece::Timestamp => "{timestamp}".to_owned(),
                Piece::Crc32Body => "{crc32:body}".to_owned(),
                Piece::Param(name) => format!("{{param:{name}}}"),
                Piece::Header(name) => format!("{{{name}}}"),
                Piece::Literal(text) => text.clone(),
            })
            .collect();
        let stamp = match &self.timestamp {
            Some((Stamp::Header(name), _)) => format!("; `{name}` within `tolerance`"),
            Some((Stamp::Claim(name), _)) => format!("; `{name}` within `tolerance`"),
            Some(_) => "; the timestamp within `tolerance`".to_owned(),
            None => String::new(),
        };
        let mut handshake = (self.challenge.as_ref())
            .map(|challenge| format!("; handshake: {}", challenge.describe()))
            .unwrap_or_default();
        if let Some(encoding) = self.secret_encoding {
            let name = if encoding == Encoding::Hex {
                "hex"
            } else {
                "base64"
            };
            handshake = format!("; the secret {name}-decoded{handshake}");
        }
        if let Some(key_url) = &self.key_url {
            handshake = format!("; {}{handshake}", key_url.describe());
        }
        if let Some(jwt) = &self.jwt {
            let header = format!("{}<JWT>", self.prefix);
            let what = jwt.describe();
            return format!(
                "`{}: {header}`, {what}, signed with {signer}{stamp}{handshake}",
                self.header
            );
        }
        if self.signer == Signer::Token {
            return format!("`{}: {header}`, {signer} compared whole", self.header);
        }
        format!(
            "`{}: {header}`, {signer} of `{signed}`{stamp}{handshake}",
            self.header
        )
    }
}
