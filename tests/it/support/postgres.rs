//! A fresh PostgreSQL database per test on the server at 127.0.0.1:5432
//! (trust auth, as on CI's machines; `HOOKGATE_TEST_POSTGRES` names another
//! server as `host=… port=… user=…`), dropped when the test ends. No server
//! is a failure that says how to start one, never a silent skip.

use tokio_postgres::NoTls;

const SERVER: &str = "host=127.0.0.1 port=5432 user=postgres";

fn server() -> String {
    std::env::var("HOOKGATE_TEST_POSTGRES").unwrap_or_else(|_| SERVER.to_owned())
}

pub struct TestDatabase {
    pub name: String,
}

impl TestDatabase {
    pub async fn create() -> TestDatabase {
        let name = format!("hookgate_test_{:016x}", rand::random::<u64>());
        let (client, connection) = tokio_postgres::connect(&format!("{} dbname=postgres", server()), NoTls)
            .await
            .unwrap_or_else(|error| {
                panic!(
                    "PostgreSQL is not reachable ({}): {error}. The tests need a server with trust \
                     auth for 127.0.0.1, e.g. `apt-get install postgresql && service postgresql start`",
                    server()
                )
            });
        tokio::spawn(connection);
        client
            .batch_execute(&format!("CREATE DATABASE {name}"))
            .await
            .unwrap();
        TestDatabase { name }
    }

    /// The store URL of this database.
    pub fn url(&self) -> String {
        let server = server();
        let user = field(&server, "user").unwrap_or("postgres");
        let host = field(&server, "host").unwrap_or("127.0.0.1");
        let port = field(&server, "port").unwrap_or("5432");
        format!("postgres://{user}@{host}:{port}/{}", self.name)
    }

    /// A connection to the server's `postgres` database, to change this
    /// database from outside (refuse connections, end sessions).
    pub async fn admin_client(&self) -> tokio_postgres::Client {
        let (client, connection) =
            tokio_postgres::connect(&format!("{} dbname=postgres", server()), NoTls)
                .await
                .unwrap();
        tokio::spawn(connection);
        client
    }

    /// Take the database away (`false`: every session killed, new ones
    /// refused) or give it back (`true`), through `admin`.
    pub async fn allow_connections(&self, admin: &tokio_postgres::Client, allow: bool) {
        let mut sql = format!("ALTER DATABASE {} ALLOW_CONNECTIONS {allow}", self.name);
        if !allow {
            sql += &format!(
                "; SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = '{}'",
                self.name
            );
        }
        admin.batch_execute(&sql).await.unwrap();
    }

    /// A direct connection, to look at what the store wrote.
    pub async fn client(&self) -> tokio_postgres::Client {
        let (client, connection) =
            tokio_postgres::connect(&format!("{} dbname={}", server(), self.name), NoTls)
                .await
                .unwrap();
        tokio::spawn(connection);
        client
    }
}

fn field<'a>(text: &'a str, name: &str) -> Option<&'a str> {
    text.split_whitespace()
        .filter_map(|part| part.split_once('='))
        .find(|(key, _)| *key == name)
        .map(|(_, value)| value)
}

impl Drop for TestDatabase {
    fn drop(&mut self) {
        let name = self.name.clone();
        // Drop runs inside the test's runtime: use a runtime of its own.
        let _ = std::thread::spawn(move || {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .unwrap();
            runtime.block_on(async {
                if let Ok((client, connection)) =
                    tokio_postgres::connect(&format!("{} dbname=postgres", server()), NoTls).await
                {
                    tokio::spawn(connection);
                    let _ = client
                        .batch_execute(&format!("DROP DATABASE IF EXISTS {name} WITH (FORCE)"))
                        .await;
                }
            });
        })
        .join();
    }
}

/// A gateway config on the database at `url` with an admin listener (its
/// API on with `token`) and `store.timeout` set to `timeout`.
pub fn postgres_config(upstream: &str, url: &str, timeout: &str, token: bool) -> String {
    super::with_admin(
        &super::config_text(upstream, &super::Backend::Postgres(url.to_owned()), "", ""),
        token,
    )
    .replace("timeout = \"300ms\"", &format!("timeout = \"{timeout}\""))
}
