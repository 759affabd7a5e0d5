//! `optimizer bench` against a small OpenAI-compatible responder started by each test on 127.0.0.1:0 (a std
//! `TcpListener` in a thread) that streams server-sent events with controlled delays: the measured time to first
//! token and time per output token are checked against those delays (time to first token never below its delay,
//! both within a slack above);
//! malformed answers (bad JSON, a truncated stream, a 500, no stream, a refused connection, a server that never
//! answers, one that dribbles bytes forever) end in a clear error with exit code 1, never a hang; and a bench of a
//! deployment's server at its configuration makes the next `resolve` of the same fixture report the measured
//! decode rate (basis `measured`, citing the row).

use crate::common;
use common::{assert_exit, bin, fixture};

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{Ipv4Addr, SocketAddr, TcpListener, TcpStream};
use std::process::{Command, Output, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use optimizer::calibrate::server::{self, BenchError, Config, Endpoint, Timeouts};
use optimizer::emit::{Deployment, Source};
use optimizer::evidence::Basis;
use serde_json::Value;

/// What the responder does with a completion request.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Behavior {
    /// Streams `max_tokens` tokens: the first after `ttft`, then one every `itl`; usage in the last chunk when
    /// `usage`; chunked transfer coding, or a Content-Length computed in advance when `length`.
    Stream {
        ttft: Duration,
        itl: Duration,
        usage: bool,
        length: bool,
    },
    /// A valid first event, then one that is not JSON.
    BadJson,
    /// Two tokens, then the connection closes without `data: [DONE]`.
    Truncated,
    /// HTTP 500 with a JSON error body.
    Status500,
    /// Reads the request and never answers.
    Silent,
    /// Answers 200 and then one byte of padding every 200 ms, forever.
    Dribble,
    /// Sends its status line, then one byte of a header every 200 ms, forever.
    DribbleHead,
    /// Answers 200 with a JSON document instead of a stream.
    NotStreamed,
    /// Streams `max_tokens` tokens one every `ITL`, then claims `claim` completion tokens in its usage.
    Inflated { claim: u64 },
    /// Streams `events` tokens at once, whatever `max_tokens` asked for (issue 24: 200,001 events for 4 tokens).
    Flood { events: u64 },
}

/// A running responder and the request bodies it received.
struct Fake {
    addr: SocketAddr,
    bodies: Arc<Mutex<Vec<Value>>>,
}

impl Fake {
    fn url(&self) -> String {
        format!("http://{}", self.addr)
    }
}

/// Starts a responder; it lives until the test process exits.
fn start(behavior: Behavior) -> Fake {
    let listener = TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).unwrap();
    let addr = listener.local_addr().unwrap();
    let bodies = Arc::new(Mutex::new(Vec::new()));
    let seen = bodies.clone();
    std::thread::spawn(move || {
        for conn in listener.incoming() {
            let Ok(conn) = conn else { continue };
            let seen = seen.clone();
            std::thread::spawn(move || {
                let _ = handle(conn, behavior, &seen);
            });
        }
    });
    Fake { addr, bodies }
}

fn handle(conn: TcpStream, behavior: Behavior, seen: &Mutex<Vec<Value>>) -> std::io::Result<()> {
    let mut r = BufReader::new(conn.try_clone()?);
    let mut w = conn;
    let mut request_line = String::new();
    r.read_line(&mut request_line)?;
    let mut length = 0usize;
    loop {
        let mut h = String::new();
        r.read_line(&mut h)?;
        if h.trim().is_empty() {
            break;
        }
        if let Some((k, v)) = h.split_once(':')
            && k.eq_ignore_ascii_case("content-length")
        {
            length = v.trim().parse().unwrap();
        }
    }
    let mut body = vec![0; length];
    r.read_exact(&mut body)?;
    if request_line.starts_with("GET /v1/models") {
        let doc = r#"{"object":"list","data":[{"id":"fake-model","object":"model"}]}"#;
        return write!(
            w,
            "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{doc}",
            doc.len()
        );
    }
    let req: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
    seen.lock().unwrap().push(req.clone());
    let chat = request_line.contains("/chat/");
    let n = req["max_tokens"].as_u64().unwrap_or(4);
    let prompt_tokens = match &req["prompt"] {
        Value::Array(ids) => ids.len() as u64,
        Value::String(s) => s.split_whitespace().count() as u64,
        _ => 0,
    };
    let token = |i: u64| {
        if chat {
            format!(
                r#"{{"choices":[{{"index":0,"delta":{{"content":"t{i}"}},"finish_reason":null}}]}}"#
            )
        } else {
            format!(r#"{{"choices":[{{"index":0,"text":"t{i}","finish_reason":null}}]}}"#)
        }
    };
    let sse_head =
        "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n";
    let chunk = |w: &mut TcpStream, data: &str| -> std::io::Result<()> {
        let event = format!("data: {data}\n\n");
        write!(w, "{:x}\r\n{event}\r\n", event.len())?;
        w.flush()
    };
    match behavior {
        Behavior::Stream {
            ttft,
            itl,
            usage,
            length,
        } => {
            // (delay before, event) in order; a chat stream opens with a role-only delta that carries no text.
            let mut events: Vec<(Duration, String)> = Vec::new();
            if chat {
                events.push((
                    Duration::ZERO,
                    r#"{"choices":[{"index":0,"delta":{"role":"assistant","content":null}}]}"#
                        .into(),
                ));
            }
            for i in 0..n {
                events.push((if i == 0 { ttft } else { itl }, token(i)));
            }
            let last = if usage {
                format!(
                    r#"{{"choices":[{{"index":0,"text":"","finish_reason":"length"}}],"usage":{{"completion_tokens":{n},"prompt_tokens":{prompt_tokens}}}}}"#
                )
            } else {
                r#"{"choices":[{"index":0,"text":"","finish_reason":"length"}]}"#.into()
            };
            events.push((Duration::ZERO, last));
            events.push((Duration::ZERO, "[DONE]".into()));
            if length {
                let total: usize = events.iter().map(|(_, e)| e.len() + 8).sum();
                write!(
                    w,
                    "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nContent-Length: {total}\r\n\r\n"
                )?;
                for (delay, e) in &events {
                    std::thread::sleep(*delay);
                    write!(w, "data: {e}\n\n")?;
                    w.flush()?;
                }
            } else {
                w.write_all(sse_head.as_bytes())?;
                for (delay, e) in &events {
                    std::thread::sleep(*delay);
                    chunk(&mut w, e)?;
                }
                w.write_all(b"0\r\n\r\n")?;
            }
        }
        Behavior::BadJson => {
            w.write_all(sse_head.as_bytes())?;
            chunk(&mut w, &token(0))?;
            chunk(&mut w, r#"{"choices": [oops"#)?;
            chunk(&mut w, "[DONE]")?;
            w.write_all(b"0\r\n\r\n")?;
        }
        Behavior::Truncated => {
            w.write_all(sse_head.as_bytes())?;
            chunk(&mut w, &token(0))?;
            chunk(&mut w, &token(1))?;
            // Closed here: no last chunk, no [DONE].
        }
        Behavior::Status500 => {
            let body = r#"{"error":{"code":500,"message":"slot unavailable: the model crashed","type":"server_error"}}"#;
            write!(
                w,
                "HTTP/1.1 500 Internal Server Error\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
                body.len()
            )?;
        }
        Behavior::Silent => std::thread::sleep(Duration::from_secs(120)),
        Behavior::Dribble => {
            w.write_all(b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n\r\n")?;
            loop {
                w.write_all(b":")?;
                w.flush()?;
                std::thread::sleep(Duration::from_millis(200));
            }
        }
        Behavior::DribbleHead => {
            w.write_all(b"HTTP/1.1 200 OK\r\nX-Slow: ")?;
            loop {
                w.write_all(b"a")?;
                w.flush()?;
                std::thread::sleep(Duration::from_millis(200));
            }
        }
        Behavior::Inflated { claim } => {
            w.write_all(sse_head.as_bytes())?;
            for i in 0..n {
                std::thread::sleep(ITL);
                chunk(&mut w, &token(i))?;
            }
            chunk(
                &mut w,
                &format!(
                    r#"{{"choices":[{{"index":0,"text":"","finish_reason":"length"}}],"usage":{{"completion_tokens":{claim},"prompt_tokens":{prompt_tokens}}}}}"#
                ),
            )?;
            chunk(&mut w, "[DONE]")?;
            w.write_all(b"0\r\n\r\n")?;
        }
        Behavior::Flood { events } => {
            w.write_all(sse_head.as_bytes())?;
            for i in 0..events {
                chunk(&mut w, &token(i))?;
            }
            chunk(&mut w, "[DONE]")?;
            w.write_all(b"0\r\n\r\n")?;
        }
        Behavior::NotStreamed => {
            let body = r#"{"choices":[{"text":"all at once"}]}"#;
            write!(
                w,
                "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
                body.len()
            )?;
        }
    }
    w.flush()
}

/// The benchmark of `fake` with small, fast settings.
fn config(fake: &Fake, concurrency: &[u32]) -> Config {
    Config {
        endpoint: Endpoint::parse(&fake.url()).unwrap(),
        chat: false,
        served_model: None,
        prompt_tokens: 32,
        max_tokens: 6,
        concurrency: concurrency.to_vec(),
        requests: 4,
        warmup: 1,
        strict_openai: false,
        token_ids: true,
        timeouts: Timeouts::new(Duration::from_secs(10)),
    }
}

const TTFT: Duration = Duration::from_millis(150);
const ITL: Duration = Duration::from_millis(25);
/// How far above the responder's delays a measurement may land on a loaded 2-core machine (thread wake-ups,
/// a debug build); below them it cannot land at all.
const SLACK_MS: f64 = 120.0;

fn stream(usage: bool, length: bool) -> Behavior {
    Behavior::Stream {
        ttft: TTFT,
        itl: ITL,
        usage,
        length,
    }
}

#[test]
fn time_to_first_token_and_per_token_latency_match_the_responders_delays() {
    for (usage, length, chat) in [
        (true, false, false),
        (false, true, false),
        (true, false, true),
    ] {
        let fake = start(stream(usage, length));
        let mut cfg = config(&fake, &[1, 4]);
        if chat {
            (cfg.chat, cfg.token_ids) = (true, false);
        }
        let report = server::run(&cfg, &|_| {}).unwrap();
        let case = format!("usage {usage}, Content-Length {length}, chat {chat}");
        assert_eq!(report.levels.len(), 2, "{case}");
        assert_eq!(report.served_model.as_deref(), Some("fake-model"), "{case}");
        let ttft_ms = 1e3 * TTFT.as_secs_f64();
        let itl_ms = 1e3 * ITL.as_secs_f64();
        for l in &report.levels {
            let what = format!("{case}, concurrency {}", l.concurrency);
            assert_eq!(l.requests, 4, "{what}");
            assert_eq!(l.generated_tokens, 4 * 6, "{what}");
            // The chat stream's role-only delta at 0 ms is not the first token.
            assert!(
                l.ttft_ms.min >= ttft_ms && l.ttft_ms.median < ttft_ms + SLACK_MS,
                "{what}: ttft {:?}",
                l.ttft_ms
            );
            let tpot = l.tpot_ms.unwrap();
            // The first token read late shortens a request's span, so its TPOT can dip a little below the
            // responder's pace; the median cannot dip far.
            assert!(
                tpot.median >= 0.95 * itl_ms && tpot.median < itl_ms + SLACK_MS / 5.0,
                "{what}: tpot {tpot:?}"
            );
            // Requests decoding together: the aggregate is the per-sequence rate times the requests in flight,
            // give or take the staggered starts.
            let per_sequence = 1e3 / itl_ms;
            let decode = l.decode_tokens_per_s.unwrap();
            let c = f64::from(l.concurrency);
            assert!(
                decode <= per_sequence * c * 1.05 && decode > per_sequence * c * 0.5,
                "{what}: decode {decode} tokens/s for {per_sequence} per sequence"
            );
            assert_eq!(
                l.tokens_counted_from,
                if usage {
                    server::TokenCount::Usage
                } else {
                    server::TokenCount::Chunks
                },
                "{what}"
            );
        }
        // 1 warm-up + 4 + 4 requests, each with the served model and, for /v1/completions, 32 token ids.
        let bodies = fake.bodies.lock().unwrap();
        assert_eq!(bodies.len(), 9, "{case}");
        for b in bodies.iter() {
            assert_eq!(b["model"], "fake-model");
            assert_eq!(b["stream"], true);
            assert_eq!(b["ignore_eos"], true);
            assert_eq!(b["cache_prompt"], false);
            assert_eq!(b["max_tokens"], 6);
            if !chat {
                assert_eq!(b["prompt"].as_array().unwrap().len(), 32);
            }
        }
        // Distinct prompts: no server can answer one from another's cached prefix.
        let prompts: std::collections::BTreeSet<String> =
            bodies.iter().map(|b| b["prompt"].to_string()).collect();
        assert!(chat || prompts.len() == 9, "{case}");
    }
}

#[test]
fn a_server_dribbling_bytes_forever_is_stopped_by_the_request_deadline() {
    // In the body, and in the head (where the message once gave the time left, about 0 s, for the deadline).
    for behavior in [Behavior::Dribble, Behavior::DribbleHead] {
        dribbled(behavior);
    }
}

fn dribbled(behavior: Behavior) {
    let fake = start(behavior);
    let mut cfg = config(&fake, &[1]);
    (cfg.warmup, cfg.prompt_tokens, cfg.max_tokens) = (0, 10, 10);
    // 1 s idle, plus 20 tokens x 50 ms: a 2 s deadline; the dribble never lets the idle timeout fire.
    cfg.timeouts = Timeouts {
        connect: Duration::from_secs(1),
        idle: Duration::from_secs(1),
        per_token: Duration::from_millis(50),
    };
    let started = Instant::now();
    let e = server::run(&cfg, &|_| {}).unwrap_err();
    assert!(
        matches!(e, BenchError::Deadline { .. }),
        "{behavior:?}: {e}"
    );
    assert!(
        e.to_string().contains("deadline of 2 s"),
        "{behavior:?}: {e}"
    );
    assert!(started.elapsed() < Duration::from_secs(10));
}

/// The binary, killed and failed if it runs longer than a minute (a hang is a failure, not a stuck test run).
fn run_cli(db: &std::path::Path, args: &[&str]) -> (Output, Duration) {
    let started = Instant::now();
    let mut child = bin()
        .arg("--db")
        .arg(db)
        .args(args)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    loop {
        if child.try_wait().unwrap().is_some() {
            break;
        }
        if started.elapsed() > Duration::from_secs(60) {
            let _ = child.kill();
            panic!("optimizer {args:?} hung");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    (child.wait_with_output().unwrap(), started.elapsed())
}

#[test]
fn malformed_answers_end_in_clear_errors_with_their_exit_codes_and_no_hang() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("b.db");
    // A port that refuses: bound, then released.
    let refused = {
        let l = TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).unwrap();
        format!("http://{}", l.local_addr().unwrap())
    };
    let cases: Vec<(String, Vec<&str>, i32, Vec<String>)> = {
        let url = |b| start(b).url();
        let bad_json = url(Behavior::BadJson);
        let truncated = url(Behavior::Truncated);
        let failing = url(Behavior::Status500);
        let silent = url(Behavior::Silent);
        let not_streamed = url(Behavior::NotStreamed);
        vec![
            (
                bad_json.clone(),
                vec![],
                1,
                vec![
                    format!("{bad_json}/v1/completions"),
                    "malformed response: event 2 is not JSON".into(),
                    "{\"choices\": [oops".into(),
                ],
            ),
            (
                truncated.clone(),
                vec![],
                1,
                vec!["the stream ended after 2 events without `data: [DONE]`".into()],
            ),
            (
                failing.clone(),
                vec![],
                1,
                vec![
                    format!("{failing}/v1/completions: HTTP 500 Internal Server Error"),
                    "slot unavailable: the model crashed".into(),
                ],
            ),
            (
                refused.clone(),
                vec![],
                1,
                vec![
                    "cannot connect to".into(),
                    "hint: is the server running there?".into(),
                ],
            ),
            (
                silent.clone(),
                vec!["--timeout", "1"],
                1,
                vec![
                    "no answer for 1 s waiting for the response (--timeout)".into(),
                    "hint: raise --timeout".into(),
                ],
            ),
            (
                not_streamed,
                vec![],
                1,
                vec!["Content-Type application/json, not text/event-stream".into()],
            ),
            (
                "https://127.0.0.1:1".into(),
                vec![],
                2,
                vec!["https is not supported".into()],
            ),
            (
                bad_json,
                vec!["--concurrency", "0"],
                2,
                vec!["concurrency 0: 1 to 1024".into()],
            ),
        ]
    };
    for (url, extra, code, says) in &cases {
        let mut args = vec!["bench", "--url", url, "--token-ids", "--warmup", "0"];
        args.extend(extra.iter().copied());
        let (o, took) = run_cli(&db, &args);
        let err = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(*code), "{url} {extra:?}: {err}");
        for s in says {
            assert!(
                err.contains(s.as_str()),
                "{url} {extra:?}: no {s:?} in {err}"
            );
        }
        assert!(o.stdout.is_empty(), "{url}: nothing on stdout on failure");
        assert!(took < Duration::from_secs(30), "{url}: took {took:?}");
    }
    // Nothing was recorded by any of them.
    let (o, _) = run_cli(&db, &["measurements", "list", "--format", "json"]);
    assert_exit(&o, 0);
    assert_eq!(
        serde_json::from_slice::<Value>(&o.stdout).unwrap(),
        Value::Array(vec![])
    );
}

#[test]
fn without_a_deployment_the_results_are_printed_and_nothing_is_recorded() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("b.db");
    let fake = start(stream(true, false));
    let url = fake.url();
    let (o, _) = run_cli(
        &db,
        &[
            "bench",
            "--url",
            &url,
            "--token-ids",
            "--concurrency",
            "1",
            "--requests",
            "2",
            "--max-tokens",
            "3",
            "--prompt-tokens",
            "16",
        ],
    );
    assert_exit(&o, 0);
    let out = String::from_utf8_lossy(&o.stdout);
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        out.contains("ttft p50") && out.contains("decode tok/s"),
        "{out}"
    );
    assert!(
        out.contains("prompt 16 tokens (16 as the server counted)"),
        "{out}"
    );
    assert!(
        out.contains("tokens counted from the server's usage.completion_tokens"),
        "{out}"
    );
    assert!(err.contains("not recorded: no --deployment"), "{err}");
    let (o, _) = run_cli(&db, &["measurements", "list", "--format", "json"]);
    assert_eq!(
        serde_json::from_slice::<Value>(&o.stdout).unwrap(),
        Value::Array(vec![])
    );
}

fn resolve(db: &std::path::Path, out: Option<&std::path::Path>) -> Deployment {
    let (o, _) = run_cli(
        db,
        &[
            "--inventory",
            fixture("inventories/cpu-server.yaml").to_str().unwrap(),
            "resolve",
            "-w",
            "chat",
            "--format",
            "json",
            "-m",
            fixture("gguf/llama-q4_k_m.gguf").to_str().unwrap(),
        ],
    );
    assert_exit(&o, 0);
    if let Some(p) = out {
        std::fs::write(p, &o.stdout).unwrap();
    }
    serde_json::from_slice(&o.stdout).unwrap()
}

#[test]
fn a_bench_at_the_deployments_configuration_becomes_the_next_plans_measured_decode_rate() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("b.db");
    let dep = dir.path().join("deploy.json");
    let before = resolve(&db, Some(&dep));
    assert_eq!(before.performance.basis, Basis::Analytic);
    let parallel = common::llama(&before).parallel;
    let fake = start(stream(true, false));
    let levels = format!("1,{parallel},{}", parallel + 1);
    let (o, _) = run_cli(
        &db,
        &[
            "bench",
            "--url",
            &fake.url(),
            "--deployment",
            dep.to_str().unwrap(),
            "--token-ids",
            "--concurrency",
            &levels,
            "--requests",
            "4",
            "--format",
            "json",
        ],
    );
    assert_exit(&o, 0);
    let done: Value = serde_json::from_slice(&o.stdout).unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    // More in flight than the deployment's slots: its decode rate is not a configuration that ran.
    assert!(
        err.contains(&format!(
            "not recorded: decode_tokens_per_s at concurrency {}: the deployment decodes at most {parallel} sequences together",
            parallel + 1
        )),
        "{err}"
    );
    let rows: Vec<i64> = done["recorded"]["rows"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r.as_i64().unwrap())
        .collect();
    // ttft, tpot and decode at 1 and at `parallel`; ttft and tpot at parallel + 1.
    assert_eq!(rows.len(), 8, "{done}");
    let (o, _) = run_cli(&db, &["measurements", "list", "--format", "json"]);
    let listed: Vec<Value> = serde_json::from_slice(&o.stdout).unwrap();
    let decode = listed
        .iter()
        .find(|r| r["metric"] == "decode_tokens_per_s" && r["sequences"] == u64::from(parallel))
        .unwrap();
    assert_eq!(decode["tool"], "bench");
    assert_eq!(decode["status"], "complete");
    assert_eq!(decode["threads"], u64::from(common::llama(&before).threads));
    let level = done["report"]["levels"]
        .as_array()
        .unwrap()
        .iter()
        .find(|l| l["concurrency"] == u64::from(parallel))
        .unwrap();
    assert_eq!(decode["value"], level["decode_tokens_per_s"]);

    let after = resolve(&db, None);
    assert_eq!(common::llama(&after), common::llama(&before));
    assert_eq!(after.performance.basis, Basis::Measured);
    let row = decode["row"].as_i64().unwrap();
    assert_eq!(after.performance.evidence, vec![row]);
    let measured = decode["value"].as_f64().unwrap();
    assert_eq!(
        after.performance.decode_tokens_per_s,
        (measured * 1000.0).round() / 1000.0
    );
    let why = &after.provenance["performance.decode_tokens_per_s"];
    assert_eq!(why.source, Source::Measured);
    assert!(
        why.detail.contains(&format!("store row {row} (bench)")),
        "{}",
        why.detail
    );
}

#[test]
fn a_deployment_that_cannot_hold_the_requests_is_refused_before_any_request() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("b.db");
    let dep = dir.path().join("deploy.json");
    let d = resolve(&db, Some(&dep));
    let per_sequence = common::llama(&d).context_per_sequence;
    let fake = start(stream(true, false));
    let (o, _) = run_cli(
        &db,
        &[
            "bench",
            "--url",
            &fake.url(),
            "--deployment",
            dep.to_str().unwrap(),
            "--token-ids",
            "--prompt-tokens",
            &per_sequence.to_string(),
            "--max-tokens",
            "8",
        ],
    );
    assert_exit(&o, 2);
    assert!(String::from_utf8_lossy(&o.stderr).contains("exceed the"));
    assert!(
        fake.bodies.lock().unwrap().is_empty(),
        "no request was sent"
    );
    let (o, _) = run_cli(
        &db,
        &[
            "bench",
            "--url",
            &fake.url(),
            "--deployment",
            dir.path().join("absent.yaml").to_str().unwrap(),
        ],
    );
    assert_exit(&o, 2);
}

/// The pinned llama-server, started from the argv a plan for this machine emits (loopback only), benchmarked
/// through the binary with the plan as `--deployment`; the next `resolve` reports the measured decode rate, and
/// the client's per-token latency agrees with the server's own timings.
#[test]
#[ignore = "needs LLAMA_SERVER: a build of the pinned llama.cpp's llama-server (tests/fixtures/llama-cpp/README.md)"]
fn the_pinned_llama_server_is_benchmarked_and_the_next_plan_uses_it() {
    let Some(server_bin) = std::env::var_os("LLAMA_SERVER").filter(|v| !v.is_empty()) else {
        eprintln!("skipped: set LLAMA_SERVER to the pinned llama-server binary");
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("b.db");
    let inv = dir.path().join("here.yaml");
    let (o, _) = run_cli(&db, &["probe", "--format", "yaml"]);
    assert_exit(&o, 0);
    std::fs::write(&inv, &o.stdout).unwrap();
    let model = fixture("gguf/llama-q4_k_m.gguf");
    let dep = dir.path().join("deploy.json");
    let plan = |db: &std::path::Path| {
        let (o, _) = run_cli(
            db,
            &[
                "--inventory",
                inv.to_str().unwrap(),
                "resolve",
                "-w",
                "chat",
                "--format",
                "json",
                "-m",
                model.to_str().unwrap(),
            ],
        );
        assert_exit(&o, 0);
        (
            serde_json::from_slice::<Deployment>(&o.stdout).unwrap(),
            o.stdout,
        )
    };
    let (before, text) = plan(&db);
    std::fs::write(&dep, text).unwrap();
    let argv = &before.artifact("llama-server").unwrap().argv;
    let port = TcpListener::bind((Ipv4Addr::LOCALHOST, 0))
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let log = tempfile::NamedTempFile::new().unwrap();
    let mut child = Command::new(&server_bin)
        .args(&argv[1..])
        .args(["--host", "127.0.0.1", "--port", &port.to_string()])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(log.reopen().unwrap())
        .spawn()
        .unwrap();
    let url = format!("http://127.0.0.1:{port}");
    let started = Instant::now();
    let ready = loop {
        if child.try_wait().unwrap().is_some() {
            break false;
        }
        let ok = TcpStream::connect((Ipv4Addr::LOCALHOST, port)).is_ok_and(|mut s| {
            s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
            let _ = s.write_all(b"GET /health HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
            let mut head = [0u8; 12];
            s.read_exact(&mut head).is_ok() && &head[9..12] == b"200"
        });
        if ok || started.elapsed() > Duration::from_secs(60) {
            break ok;
        }
        std::thread::sleep(Duration::from_millis(250));
    };
    let parallel = common::llama(&before).parallel;
    let levels = format!("1,{parallel}");
    let outcome = ready.then(|| {
        run_cli(
            &db,
            &[
                "bench",
                "--url",
                &url,
                "--deployment",
                dep.to_str().unwrap(),
                "--token-ids",
                "--concurrency",
                &levels,
                "--requests",
                "8",
                "--prompt-tokens",
                "128",
                "--max-tokens",
                "32",
                "--format",
                "json",
            ],
        )
        .0
    });
    // Only the child this test started, by its handle.
    let _ = child.kill();
    let _ = child.wait();
    let Some(o) = outcome else {
        panic!(
            "llama-server {argv:?} did not answer /health: {}",
            std::fs::read_to_string(log.path()).unwrap_or_default()
        );
    };
    assert_exit(&o, 0);
    let done: Value = serde_json::from_slice(&o.stdout).unwrap();
    let report = &done["report"];
    assert!(
        report["server_fingerprint"]
            .as_str()
            .unwrap()
            .contains("0c1e570"),
        "the pinned build: {report}"
    );
    for l in report["levels"].as_array().unwrap() {
        assert_eq!(
            l["prompt_tokens"], 128,
            "llama-server counted the token-id prompt: {l}"
        );
        assert_eq!(
            l["generated_tokens"],
            8 * 32,
            "ignore_eos: every request generated 32: {l}"
        );
        assert_eq!(l["tokens_counted_from"], "usage");
        eprintln!(
            "llama-server at concurrency {}: ttft p50 {:.1} ms p90 {:.1} ms, tpot p50 {:.2} ms, decode {:.0} tokens/s (server's own per request: {:.0}), output {:.0} tokens/s",
            l["concurrency"],
            l["ttft_ms"]["median"].as_f64().unwrap(),
            l["ttft_ms"]["p90"].as_f64().unwrap(),
            l["tpot_ms"]["median"].as_f64().unwrap(),
            l["decode_tokens_per_s"].as_f64().unwrap(),
            l["server_decode_tokens_per_s"].as_f64().unwrap(),
            l["output_tokens_per_s"].as_f64().unwrap(),
        );
    }
    // One request at a time: the client's median per-token latency and the server's own decode timing of the
    // same tokens agree (the client adds only the streaming of each token).
    let one = &report["levels"][0];
    let client = 1e3 / one["tpot_ms"]["median"].as_f64().unwrap();
    let own = one["server_decode_tokens_per_s"].as_f64().unwrap();
    assert!(
        client > own * 0.75 && client < own * 1.25,
        "client {client:.0} vs server {own:.0} tokens/s"
    );
    let after = plan(&db).0;
    assert_eq!(common::llama(&after), common::llama(&before));
    assert_eq!(after.performance.basis, Basis::Measured);
    let why = &after.provenance["performance.decode_tokens_per_s"];
    assert_eq!(why.source, Source::Measured);
    assert!(why.detail.contains("(bench)"), "{}", why.detail);
    eprintln!(
        "resolve before: {} decode tokens/s ({:?}); after: {} ({:?}, {})",
        before.performance.decode_tokens_per_s,
        before.performance.basis,
        after.performance.decode_tokens_per_s,
        after.performance.basis,
        why.detail
    );
}

/// A server whose usage claims more tokens than were asked for (and streamed) is not trusted for the count: the
/// streamed events are. Trusted, a claim of 2^40 tokens made a decode rate ten billion times the real one (then
/// recorded as measured), and one of u64::MAX overflowed the level's sum.
#[test]
fn a_usage_count_above_the_tokens_requested_is_not_trusted() {
    for claim in [1u64 << 40, u64::MAX] {
        let fake = start(Behavior::Inflated { claim });
        let report = server::run(&config(&fake, &[1, 2]), &|_| {}).unwrap();
        let per_sequence = 1.0 / ITL.as_secs_f64();
        for l in &report.levels {
            let what = format!("claim {claim}, concurrency {}", l.concurrency);
            assert_eq!(l.generated_tokens, u64::from(l.requests) * 6, "{what}");
            assert_eq!(l.tokens_counted_from, server::TokenCount::Chunks, "{what}");
            let decode = l.decode_tokens_per_s.unwrap();
            assert!(
                decode <= per_sequence * f64::from(l.concurrency) * 1.05,
                "{what}: decode {decode} tokens/s"
            );
        }
    }
}

#[test]
fn a_stream_of_more_events_than_max_tokens_is_not_a_measurement() {
    let fake = start(Behavior::Flood { events: 200_001 });
    let started = Instant::now();
    let e = server::run(&config(&fake, &[1]), &|_| {}).unwrap_err();
    assert!(matches!(e, BenchError::Malformed { .. }), "{e}");
    assert!(e.to_string().contains("more tokens than asked for"), "{e}");
    // It stops at the first event past --max-tokens rather than reading the flood to its end.
    assert!(
        started.elapsed() < Duration::from_secs(30),
        "{:?}",
        started.elapsed()
    );
}

#[test]
fn a_bench_rate_the_device_could_not_reach_is_not_recorded() {
    use optimizer_testkit::gguf_builder::LlamaShape;
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("b.db");
    let dep = dir.path().join("deploy.json");
    // A 70B model on a CPU server: its bandwidth roofline is a few tokens per second per sequence, so a responder
    // streaming a token every millisecond is not that deployment (issue 24: 512,845 tok/s recorded and used).
    let (model, _) = common::synth(dir.path(), "m70.gguf", LlamaShape::LLAMA3_70B);
    let (o, _) = run_cli(
        &db,
        &[
            "--inventory",
            fixture("inventories/cpu-server.yaml").to_str().unwrap(),
            "resolve",
            "-w",
            "chat",
            "--format",
            "json",
            "-m",
            model.to_str().unwrap(),
        ],
    );
    // A 70B on CPUs misses the chat preset's per-token target (exit 5): it still runs, as planned.
    common::assert_planned(&o);
    std::fs::write(&dep, &o.stdout).unwrap();
    let fake = start(Behavior::Stream {
        ttft: Duration::ZERO,
        itl: Duration::from_millis(1),
        usage: true,
        length: false,
    });
    let (o, _) = run_cli(
        &db,
        &[
            "bench",
            "--url",
            &fake.url(),
            "--deployment",
            dep.to_str().unwrap(),
            "--token-ids",
            "--concurrency",
            "1",
            "--requests",
            "2",
            "--max-tokens",
            "8",
            "--format",
            "json",
        ],
    );
    assert_exit(&o, 0);
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        err.contains("decode_tokens_per_s at concurrency 1")
            && err.contains("above what the device can do"),
        "{err}"
    );
    let (o, _) = run_cli(&db, &["measurements", "list", "--format", "json"]);
    let listed: Vec<Value> = serde_json::from_slice(&o.stdout).unwrap();
    assert!(
        listed.iter().all(|r| r["metric"] != "decode_tokens_per_s"),
        "{listed:?}"
    );
}
