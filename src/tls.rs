//! TLS: the public listener's certificate and the client side of `https://`
//! upstreams, both on rustls.
//!
//! One crypto provider, chosen explicitly: *ring*. It builds with nothing but
//! a C compiler (aws-lc-rs needs CMake and takes minutes), its
//! HMAC/AES-GCM/ChaCha20 throughput is on par for the TLS 1.2/1.3 suites
//! hookgate offers, and FIPS is not a requirement here. Only TLS 1.2 and 1.3
//! are spoken; the server offers ALPN `h2` and `http/1.1`. There is
//! deliberately no option to skip upstream certificate verification:
//! private CAs are added with `upstream_ca`.

use std::path::Path;
use std::sync::Arc;

use rustls::crypto::CryptoProvider;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::{ClientConfig, RootCertStore, ServerConfig};

const VERSIONS: &[&rustls::SupportedProtocolVersion] =
    &[&rustls::version::TLS13, &rustls::version::TLS12];

fn provider() -> Arc<CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

/// Make *ring* the process-wide default too, for libraries that build their
/// own rustls configs (the Redis client's `rediss://`). Idempotent.
pub fn install_default_provider() {
    let _ = rustls::crypto::ring::default_provider().install_default();
}

/// Every certificate in a PEM file (a chain, or a CA bundle).
pub fn load_certs(path: &Path) -> Result<Vec<CertificateDer<'static>>, String> {
    let certs = CertificateDer::pem_file_iter(path)
        .map_err(|e| format!("cannot read {}: {e}", path.display()))?
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| format!("{} is not a PEM certificate file: {e}", path.display()))?;
    if certs.is_empty() {
        return Err(format!("{} holds no PEM certificate", path.display()));
    }
    Ok(certs)
}

/// When the first certificate of the PEM chain at `path` (the leaf) expires,
/// in Unix seconds: for `hookgate_tls_cert_expiry_timestamp_seconds`.
pub fn leaf_not_after(path: &Path) -> Option<i64> {
    let leaf = load_certs(path).ok()?.into_iter().next()?;
    let (_, parsed) = x509_parser::parse_x509_certificate(leaf.as_ref()).ok()?;
    Some(parsed.validity().not_after.timestamp())
}

/// The listener's TLS config from a PEM chain and a PEM key (PKCS#8,
/// PKCS#1 or SEC1). Read from disk every time, so a reload picks up a
/// rotated certificate.
pub fn server_config(cert: &Path, key: &Path) -> Result<Arc<ServerConfig>, String> {
    let chain = load_certs(cert)?;
    let key = PrivateKeyDer::from_pem_file(key).map_err(|e| {
        format!(
            "{} is not a PEM private key (PKCS#8, PKCS#1 or SEC1): {e}",
            key.display()
        )
    })?;
    let mut config = ServerConfig::builder_with_provider(provider())
        .with_protocol_versions(VERSIONS)
        .map_err(|e| e.to_string())?
        .with_no_client_auth()
        .with_single_cert(chain, key)
        .map_err(|e| format!("the certificate and key do not fit together: {e}"))?;
    config.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
    Ok(Arc::new(config))
}

/// Client config for `https://` upstreams: the Mozilla roots (webpki-roots)
/// plus `extra_roots` (a route's `upstream_ca`).
pub fn client_config(extra_roots: &[CertificateDer<'static>]) -> Result<Arc<ClientConfig>, String> {
    let mut roots = RootCertStore::empty();
    roots.extend(webpki_roots::TLS_SERVER_ROOTS.iter().cloned());
    for cert in extra_roots {
        roots
            .add(cert.clone())
            .map_err(|e| format!("not a usable CA certificate: {e}"))?;
    }
    let config = ClientConfig::builder_with_provider(provider())
        .with_protocol_versions(VERSIONS)
        .map_err(|e| e.to_string())?
        .with_root_certificates(roots)
        .with_no_client_auth();
    Ok(Arc::new(config))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_when_the_leaf_expires() {
        let mut params = rcgen::CertificateParams::new(vec!["localhost".to_owned()]).unwrap();
        params.not_after = rcgen::date_time_ymd(2031, 7, 1);
        let key = rcgen::KeyPair::generate().unwrap();
        let cert = params.self_signed(&key).unwrap();
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("tls.crt");
        std::fs::write(&path, cert.pem()).unwrap();
        // 2031-07-01T00:00:00Z
        assert_eq!(leaf_not_after(&path), Some(1_940_630_400));
        assert_eq!(leaf_not_after(&dir.path().join("missing.crt")), None);
    }
}
