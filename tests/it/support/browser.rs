//! A real browser for the console's tests: chromedriver driving a
//! headless Chromium through WebDriver's HTTP API, with screenshots in
//! `target/console/`.

use std::process::{Child, Command, Stdio};
use std::time::Duration;
use tokio::time::Instant;

use bytes::Bytes;
use http::{Method, Request};
use http_body_util::Full;
use serde_json::{json, Value};

use super::Sender;

/// chromedriver driving a headless Chromium, through WebDriver's HTTP API.
pub struct Browser {
    driver: Child,
    base: String,
    session: String,
}

impl Drop for Browser {
    fn drop(&mut self) {
        // Ending the session makes chromedriver close Chromium; killing the
        // driver alone leaves the browser's processes running.
        if !self.session.is_empty() {
            let _ = self.end_session();
        }
        let _ = self.driver.kill();
        let _ = self.driver.wait();
    }
}

const ELEMENT: &str = "element-6066-11e4-a52e-4f735466cecf";

impl Browser {
    /// `None` (the test skips) where Chromium is not installed, except on
    /// CI, where that fails.
    pub async fn start() -> Option<Browser> {
        let installed = ["/usr/bin/chromium", "/usr/bin/chromedriver"]
            .iter()
            .all(|path| std::path::Path::new(path).exists());
        if !installed {
            assert!(
                std::env::var("CI").is_err(),
                "chromium and chromium-driver are required on CI (.ci/run installs them)"
            );
            eprintln!("skipping: chromium / chromedriver not installed");
            return None;
        }
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let driver = Command::new("/usr/bin/chromedriver")
            .arg(format!("--port={port}"))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("chromedriver starts");
        let mut browser = Browser {
            driver,
            base: format!("http://127.0.0.1:{port}"),
            session: String::new(),
        };
        let capabilities = json!({"capabilities": {"alwaysMatch": {
            "browserName": "chrome",
            "goog:chromeOptions": {
                "binary": "/usr/bin/chromium",
                "args": ["--headless=new", "--no-sandbox", "--disable-dev-shm-usage",
                         "--disable-gpu", "--window-size=1360,1000"],
            },
        }}});
        let deadline = Instant::now() + Duration::from_secs(30);
        let session = loop {
            match browser
                .try_call(Method::POST, "/session", Some(&capabilities))
                .await
            {
                Ok(value) if value["sessionId"].is_string() => break value,
                _ if Instant::now() < deadline => {
                    tokio::time::sleep(Duration::from_millis(200)).await
                }
                other => panic!("no WebDriver session: {other:?}"),
            }
        };
        browser.session = session["sessionId"].as_str().unwrap().to_owned();
        Some(browser)
    }

    /// `DELETE /session/{id}`, blocking (from `drop`).
    fn end_session(&self) -> std::io::Result<()> {
        use std::io::{Read, Write};
        let address = self.base.trim_start_matches("http://");
        let mut stream = std::net::TcpStream::connect(address)?;
        stream.set_read_timeout(Some(Duration::from_secs(10)))?;
        write!(
            stream,
            "DELETE /session/{} HTTP/1.1\r\nHost: {address}\r\nContent-Length: 0\r\n\
             Connection: close\r\n\r\n",
            self.session
        )?;
        stream.read_to_end(&mut Vec::new()).map(drop)
    }

    async fn try_call(
        &self,
        method: Method,
        path: &str,
        body: Option<&Value>,
    ) -> Result<Value, String> {
        let url = if path == "/session" {
            format!("{}{path}", self.base)
        } else {
            format!("{}/session/{}{path}", self.base, self.session)
        };
        let body = body.map(Value::to_string).unwrap_or_default();
        let request = Request::builder()
            .method(method)
            .uri(url)
            .header("content-type", "application/json")
            .body(Full::new(Bytes::from(body)))
            .unwrap();
        let answer = Sender::new().try_send(request).await?;
        let value: Value = serde_json::from_slice(&answer.body).map_err(|e| e.to_string())?;
        if answer.status.is_success() {
            Ok(value["value"].clone())
        } else {
            Err(value["value"].to_string())
        }
    }

    async fn call(&self, method: Method, path: &str, body: Value) -> Value {
        let body = (!body.is_null()).then_some(&body);
        self.try_call(method, path, body)
            .await
            .unwrap_or_else(|error| panic!("WebDriver {path}: {error}"))
    }

    pub async fn goto(&self, url: &str) {
        self.call(Method::POST, "/url", json!({ "url": url })).await;
    }

    /// Open the console at `ui` (a gateway's `admin_url("/ui")`) and log in
    /// with the tests' admin token.
    pub async fn open_console(&self, ui: &str) {
        self.goto(ui).await;
        self.type_into("#token", super::ADMIN_TOKEN).await;
        self.click("#login").await;
    }

    /// Run `script` in the page; its return value.
    pub async fn run(&self, script: &str) -> Value {
        self.call(
            Method::POST,
            "/execute/sync",
            json!({ "script": script, "args": [] }),
        )
        .await
    }

    /// Wait (up to 10 s) until `script` returns something truthy.
    pub async fn wait_for(&self, what: &str, script: &str) -> Value {
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            let value = self.run(script).await;
            if !(value.is_null() || value == false || value == "") {
                return value;
            }
            assert!(Instant::now() < deadline, "timed out waiting for {what}");
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    pub async fn element(&self, css: &str) -> String {
        let found = self
            .call(
                Method::POST,
                "/element",
                json!({ "using": "css selector", "value": css }),
            )
            .await;
        found[ELEMENT].as_str().unwrap().to_owned()
    }

    pub async fn click(&self, css: &str) {
        let id = self.element(css).await;
        self.call(Method::POST, &format!("/element/{id}/click"), json!({}))
            .await;
    }

    pub async fn type_into(&self, css: &str, text: &str) {
        let id = self.element(css).await;
        self.call(
            Method::POST,
            &format!("/element/{id}/value"),
            json!({ "text": text }),
        )
        .await;
    }

    /// Accept the open `confirm()` dialog, waiting for it to open; what it
    /// asked.
    pub async fn confirm(&self) -> String {
        let deadline = Instant::now() + Duration::from_secs(5);
        loop {
            match self.try_call(Method::GET, "/alert/text", None).await {
                Ok(text) => {
                    self.call(Method::POST, "/alert/accept", json!({})).await;
                    return text.as_str().unwrap_or_default().to_owned();
                }
                Err(error) => assert!(Instant::now() < deadline, "no confirmation asked: {error}"),
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    pub async fn screenshot(&self, name: &str) {
        use base64::Engine;
        let png = self.call(Method::GET, "/screenshot", Value::Null).await;
        let png = base64::engine::general_purpose::STANDARD
            .decode(png.as_str().unwrap())
            .unwrap();
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("target/console");
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join(format!("{name}.png")), png).unwrap();
    }
}
