//! A real PgBouncer (Debian's `pgbouncer`) in front of one test database,
//! on a free port, in the pooling mode a test asks for; stopped when
//! dropped. PgBouncer refuses to run as root, so it runs as `postgres`.

use std::path::Path;
use std::process::{Child, Command};
use std::time::Duration;

use super::{eventually, free_port, TestDatabase};

pub struct PgBouncer {
    child: Child,
    pub port: u16,
    /// The config and log, readable by the `postgres` user.
    dir: tempfile::TempDir,
}

impl PgBouncer {
    /// PgBouncer in `mode` ("session" or "transaction") for `database`;
    /// `None` where it is not installed (outside CI: `.ci/run` installs it).
    pub async fn start(database: &TestDatabase, mode: &str) -> Option<PgBouncer> {
        let binary = Path::new("/usr/sbin/pgbouncer");
        if !binary.exists() {
            assert!(
                std::env::var_os("CI").is_none(),
                "pgbouncer is missing (.ci/run installs it)"
            );
            eprintln!("skipped: pgbouncer is not installed");
            return None;
        }
        let dir = tempfile::tempdir().unwrap();
        let port = free_port();
        let ini = format!(
            "[databases]\n{name} = host=127.0.0.1 port=5432 dbname={name}\n\
             [pgbouncer]\nlisten_addr = 127.0.0.1\nlisten_port = {port}\n\
             auth_type = trust\nauth_file = {dir}/users.txt\npool_mode = {mode}\n\
             unix_socket_dir =\nlogfile = {dir}/pgbouncer.log\n",
            name = database.name,
            dir = dir.path().display(),
        );
        std::fs::write(dir.path().join("pgbouncer.ini"), ini).unwrap();
        std::fs::write(dir.path().join("users.txt"), "\"postgres\" \"\"\n").unwrap();
        Command::new("chown")
            .args(["-R", "postgres"])
            .arg(dir.path())
            .status()
            .unwrap();
        let child = Command::new("runuser")
            .args(["-u", "postgres", "--"])
            .arg(binary)
            .arg(dir.path().join("pgbouncer.ini"))
            .spawn()
            .expect("spawn pgbouncer");
        let bouncer = PgBouncer { child, port, dir };
        let up = eventually(Duration::from_secs(10), || {
            std::future::ready(std::net::TcpStream::connect(("127.0.0.1", port)).is_ok())
        });
        assert!(up.await, "pgbouncer did not start: {}", bouncer.log());
        Some(bouncer)
    }

    /// The store URL of the database through PgBouncer.
    pub fn url(&self, database: &TestDatabase) -> String {
        format!(
            "postgres://postgres@127.0.0.1:{}/{}",
            self.port, database.name
        )
    }

    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("pgbouncer.log")).unwrap_or_default()
    }
}

impl Drop for PgBouncer {
    fn drop(&mut self) {
        // runuser's child: end the whole process group it leads.
        let _ = Command::new("pkill")
            .args([
                "-f",
                &self.dir.path().join("pgbouncer.ini").display().to_string(),
            ])
            .status();
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
