//! A Redis 6.2 stand-in: a proxy in front of a real `redis-server` that
//! refuses `SET … NX GET` as Redis before 7.0 does (`ERR syntax error`),
//! and passes everything else through unchanged.
//!
//! The refused command still reaches the real server, with one more,
//! unknown option, so the server itself answers the syntax error in its
//! place among the replies: pipelined commands keep their order, and the
//! server's side needs no parsing.

use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::{TcpListener, TcpStream};

pub struct OldRedis {
    pub port: u16,
    task: tokio::task::JoinHandle<()>,
}

impl OldRedis {
    /// Answer on a free port for the real server on `port`.
    pub async fn before(port: u16) -> OldRedis {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let own = listener.local_addr().unwrap().port();
        let task = tokio::spawn(async move {
            while let Ok((client, _)) = listener.accept().await {
                tokio::spawn(relay(client, port));
            }
        });
        OldRedis { port: own, task }
    }

    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.port)
    }
}

impl Drop for OldRedis {
    fn drop(&mut self) {
        self.task.abort();
    }
}

async fn relay(client: TcpStream, port: u16) {
    let Ok(server) = TcpStream::connect(("127.0.0.1", port)).await else {
        return;
    };
    let (client_read, mut client_write) = client.into_split();
    let (mut server_read, mut server_write) = server.into_split();
    let answers = tokio::spawn(async move {
        let _ = tokio::io::copy(&mut server_read, &mut client_write).await;
    });
    let mut commands = BufReader::new(client_read);
    while let Some(mut command) = read_command(&mut commands).await {
        let word = |i: usize| command.get(i).map(|arg| arg.to_ascii_uppercase());
        let options: Vec<Vec<u8>> = (3..command.len()).filter_map(word).collect();
        let set = word(0).as_deref() == Some(&b"SET"[..]);
        if set && options.contains(&b"NX".to_vec()) && options.contains(&b"GET".to_vec()) {
            command.push(b"BEFORE-REDIS-7".to_vec());
        }
        if server_write.write_all(&encode(&command)).await.is_err() {
            break;
        }
    }
    answers.abort();
}

/// One command as a client sends it: an array of bulk strings.
async fn read_command<R: AsyncBufReadExt + Unpin>(reader: &mut R) -> Option<Vec<Vec<u8>>> {
    let count: usize = header(reader, b'*').await?;
    let mut args = Vec::with_capacity(count);
    for _ in 0..count {
        let len: usize = header(reader, b'$').await?;
        let mut arg = vec![0; len + 2];
        reader.read_exact(&mut arg).await.ok()?;
        arg.truncate(len);
        args.push(arg);
    }
    Some(args)
}

/// A `{kind}N\r\n` line's N.
async fn header<R: AsyncBufReadExt + Unpin>(reader: &mut R, kind: u8) -> Option<usize> {
    let mut line = Vec::new();
    reader.read_until(b'\n', &mut line).await.ok()?;
    let text = line.strip_prefix(&[kind])?.strip_suffix(b"\r\n")?;
    std::str::from_utf8(text).ok()?.parse().ok()
}

fn encode(command: &[Vec<u8>]) -> Vec<u8> {
    let mut out = format!("*{}\r\n", command.len()).into_bytes();
    for arg in command {
        out.extend(format!("${}\r\n", arg.len()).into_bytes());
        out.extend(arg);
        out.extend(b"\r\n");
    }
    out
}
