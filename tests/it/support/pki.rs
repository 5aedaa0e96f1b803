//! Real TLS: a test CA and the certificates it signs, and an HTTPS client
//! that trusts it.

use std::sync::Arc;

use bytes::Bytes;
use http::Request;
use http_body_util::{BodyExt, Full};
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;

use super::Answer;

/// A test CA and certificates it signs, as PEM files in a temp dir.
pub struct Pki {
    pub dir: tempfile::TempDir,
    ca: rcgen::CertifiedIssuer<'static, rcgen::KeyPair>,
}

impl Pki {
    pub fn new(name: &str) -> Pki {
        let mut params = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
        params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
        params
            .distinguished_name
            .push(rcgen::DnType::CommonName, format!("{name} test CA"));
        let ca = rcgen::CertifiedIssuer::self_signed(params, rcgen::KeyPair::generate().unwrap())
            .unwrap();
        let pki = Pki {
            dir: tempfile::tempdir().unwrap(),
            ca,
        };
        std::fs::write(pki.ca_path(), pki.ca.pem()).unwrap();
        pki
    }

    pub fn ca_path(&self) -> std::path::PathBuf {
        self.dir.path().join("ca.pem")
    }

    /// A certificate for localhost and 127.0.0.1: (cert path, key path).
    pub fn leaf(&self, name: &str) -> (std::path::PathBuf, std::path::PathBuf) {
        let key = rcgen::KeyPair::generate().unwrap();
        let params =
            rcgen::CertificateParams::new(vec!["localhost".to_owned(), "127.0.0.1".to_owned()])
                .unwrap();
        let cert = params.signed_by(&key, &self.ca).unwrap();
        let (cert_path, key_path) = (
            self.dir.path().join(format!("{name}.crt")),
            self.dir.path().join(format!("{name}.key")),
        );
        std::fs::write(&cert_path, cert.pem()).unwrap();
        std::fs::write(&key_path, key.serialize_pem()).unwrap();
        (cert_path, key_path)
    }

    pub fn server_config(&self, name: &str) -> Arc<rustls::ServerConfig> {
        let (cert, key) = self.leaf(name);
        hookgate::tls::server_config(&cert, &key).unwrap()
    }

    /// A TLS client config trusting only this CA.
    pub fn client_config(&self) -> rustls::ClientConfig {
        let roots = hookgate::tls::load_certs(&self.ca_path()).unwrap();
        let mut store = rustls::RootCertStore::empty();
        for root in roots {
            store.add(root).unwrap();
        }
        rustls::ClientConfig::builder_with_provider(Arc::new(
            rustls::crypto::ring::default_provider(),
        ))
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_root_certificates(store)
        .with_no_client_auth()
    }

    /// A client trusting only this CA, offering only `version` in ALPN.
    pub fn sender(&self, version: http::Version) -> HttpsSender {
        let config = self.client_config();
        let h2 = version == http::Version::HTTP_2;
        let connector = hyper_rustls::HttpsConnectorBuilder::new()
            .with_tls_config(config)
            .https_only();
        let connector = if h2 {
            connector.enable_http2().build()
        } else {
            connector.enable_http1().build()
        };
        let mut builder = Client::builder(TokioExecutor::new());
        builder.http2_only(h2);
        HttpsSender {
            client: builder.build(connector),
        }
    }
}

pub struct HttpsSender {
    client: Client<hyper_rustls::HttpsConnector<HttpConnector>, Full<Bytes>>,
}

impl HttpsSender {
    /// Send, or the connection/handshake error as text.
    pub async fn send(
        &self,
        request: Request<Full<Bytes>>,
    ) -> Result<(Answer, http::Version), String> {
        let response = self
            .client
            .request(request)
            .await
            .map_err(|e| format!("{e:?}"))?;
        let version = response.version();
        let (parts, body) = response.into_parts();
        let answer = Answer {
            status: parts.status,
            headers: parts.headers,
            body: body.collect().await.map_err(|e| e.to_string())?.to_bytes(),
        };
        Ok((answer, version))
    }
}
