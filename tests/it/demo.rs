//! `hookgate demo` as a newcomer meets it: the printed story matches what
//! the consumer recorded, and every printed `curl` line works when pasted
//! into a shell.

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;

const BIN: &str = env!("CARGO_BIN_EXE_hookgate");

/// Start `hookgate demo` and collect what it prints until `last` (a line
/// starting with it) or its end.
fn demo(args: &[&str], last: &str) -> (Child, Vec<String>) {
    let mut child = Command::new(BIN)
        .arg("demo")
        .args(args)
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("hookgate demo starts");
    let stdout = child.stdout.take().unwrap();
    let (lines_tx, lines_rx) = mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            if lines_tx.send(line).is_err() {
                break;
            }
        }
    });
    let mut lines = Vec::new();
    while let Ok(line) = lines_rx.recv_timeout(Duration::from_secs(60)) {
        let done = line.starts_with(last);
        lines.push(line);
        if done {
            break;
        }
    }
    (child, lines)
}

/// Run one printed line in a shell, as a person pasting it would.
fn paste(line: &str) -> String {
    let output = Command::new("sh")
        .args(["-c", line.trim()])
        .output()
        .expect("sh runs");
    assert!(output.status.success(), "{line}: {output:?}");
    String::from_utf8_lossy(&output.stdout).into_owned()
}

/// The `(event, count)` pairs of the consumer's `GET /` (a flat JSON object).
fn consumer_counts(json: &str) -> Vec<(String, u64)> {
    let value: serde_json::Value = serde_json::from_str(json).expect("the consumer answers JSON");
    value
        .as_object()
        .expect("an object")
        .iter()
        .map(|(id, count)| (id.clone(), count.as_u64().expect("a count")))
        .collect()
}

#[test]
fn the_demo_shows_exactly_once_and_its_curl_lines_work_when_pasted() {
    let (mut child, lines) = demo(&["--port", "0"], "Serving until Ctrl-C");
    let printed = lines.join("\n");
    assert!(
        lines.last().is_some_and(|l| l.starts_with("Serving until")),
        "the demo did not finish its script:\n{printed}"
    );

    // What the sender got, step by step.
    let first = lines.iter().position(|l| l.starts_with("1. ")).unwrap();
    assert!(
        lines[first + 1].contains("201 Created, forwarded"),
        "{printed}"
    );
    let second = lines.iter().position(|l| l.starts_with("2. ")).unwrap();
    assert!(
        lines[second + 1].contains("Idempotent-Replayed: true"),
        "{printed}"
    );
    let tally: Vec<(usize, &str)> = lines
        .iter()
        .filter_map(|l| {
            let (count, rest) = l.trim().split_once(" x ")?;
            Some((count.trim().parse().ok()?, rest))
        })
        .collect();
    assert_eq!(tally.iter().map(|(n, _)| n).sum::<usize>(), 20, "{printed}");
    let forwarded: usize = tally
        .iter()
        .filter(|(_, what)| what.contains("forwarded"))
        .map(|(n, _)| n)
        .sum();
    assert_eq!(
        forwarded, 1,
        "one copy of the burst is forwarded:\n{printed}"
    );

    // The printed summary is what the consumer recorded.
    let pasted: Vec<&String> = lines.iter().filter(|l| l.starts_with("  curl ")).collect();
    assert_eq!(pasted.len(), 6, "{printed}");
    let seen = consumer_counts(&paste(pasted[3]));
    assert_eq!(
        seen,
        vec![("evt_demo_1".to_owned(), 1), ("evt_demo_2".to_owned(), 1)]
    );
    for (id, count) in &seen {
        let line = format!("   {id}: {count} time");
        assert!(printed.contains(&line), "{line:?} not in\n{printed}");
    }

    // Each printed curl line does what its comment says.
    let replay = paste(pasted[0]).to_lowercase();
    assert!(replay.starts_with("http/1.1 201"), "{replay}");
    assert!(replay.contains("idempotent-replayed: true"), "{replay}");
    let new = paste(pasted[1]).to_lowercase();
    assert!(new.starts_with("http/1.1 201"), "{new}");
    assert!(!new.contains("idempotent-replayed"), "{new}");
    let again = paste(pasted[1]).to_lowercase();
    assert!(again.contains("idempotent-replayed: true"), "{again}");
    let forged = paste(pasted[2]).to_lowercase();
    assert!(forged.starts_with("http/1.1 401"), "{forged}");
    let seen = consumer_counts(&paste(pasted[3]));
    assert!(seen.contains(&("evt_demo_3".to_owned(), 1)), "{seen:?}");
    let record = paste(pasted[4]);
    assert!(record.contains(r#""state":"completed""#), "{record}");
    assert!(record.contains(r#""key":"evt_demo_1""#), "{record}");
    let metrics = paste(pasted[5]);
    assert!(
        metrics.contains(r#"hookgate_requests_total{outcome="replayed",route="stripe"}"#),
        "{metrics}"
    );

    // Ctrl-C (SIGTERM here) stops it cleanly and removes its directory.
    let dir = std::env::temp_dir().join(format!("hookgate-demo-{}", child.id()));
    assert!(dir.join("gateway.toml").exists());
    Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status()
        .unwrap();
    assert!(child.wait().unwrap().success());
    assert!(!dir.exists(), "{} is left behind", dir.display());
}

#[test]
fn the_demo_with_exit_runs_its_script_and_stops() {
    let (mut child, lines) = demo(&["--port", "0", "--exit"], "\u{0}never");
    let printed = lines.join("\n");
    assert!(child.wait().unwrap().success(), "{printed}");
    assert!(
        printed.contains("23 deliveries sent, 2 reached the consumer"),
        "{printed}"
    );
    assert!(!printed.contains("Serving until"), "{printed}");
}
