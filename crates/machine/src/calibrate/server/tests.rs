//! Unit tests of the server benchmark: URL parsing, HTTP de-framing, event parsing, statistics and deadlines.

use super::http::{exchange, next_event, stream};
use super::*;
use std::io::{Cursor, Read, Write};
use std::net::{Ipv4Addr, TcpListener};

/// A config for a loopback responder that answers one connection with `raw`, as it is, then closes it.
fn answering(raw: &[u8]) -> Config {
    let listener = TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).unwrap();
    let addr = listener.local_addr().unwrap();
    let raw = raw.to_vec();
    std::thread::spawn(move || {
        let Ok((mut conn, _)) = listener.accept() else {
            return;
        };
        // The request head (a GET: no body), then the answer.
        let mut seen = Vec::new();
        let mut byte = [0u8; 1];
        while !seen.ends_with(b"\r\n\r\n") && conn.read(&mut byte).is_ok_and(|n| n == 1) {
            seen.push(byte[0]);
        }
        let _ = conn.write_all(&raw);
    });
    Config {
        endpoint: Endpoint::parse(&format!("http://{addr}")).unwrap(),
        chat: false,
        served_model: None,
        prompt_tokens: 1,
        max_tokens: 1,
        concurrency: vec![1],
        requests: 1,
        warmup: 0,
        strict_openai: false,
        token_ids: false,
        timeouts: Timeouts::new(Duration::from_secs(10)),
    }
}

/// The status, content type and body of the answer `raw`, or the benchmark error it ends in.
fn fetch(raw: &[u8]) -> Result<(u16, Option<String>, Vec<u8>), BenchError> {
    let cfg = answering(raw);
    let (call, head, body) = exchange(&cfg, "GET", "/x", &[], Duration::from_secs(10))?;
    let mut out = Vec::new();
    stream(body)
        .read_to_end(&mut out)
        .map_err(|e| call.error(e, "while streaming", 0))?;
    Ok((head.status, head.content_type, out))
}

fn body_of(raw: &[u8]) -> Result<Vec<u8>, BenchError> {
    fetch(raw).map(|(_, _, body)| body)
}

#[test]
fn urls_parse_to_host_port_and_prefix_and_https_is_refused_by_name() {
    let e = Endpoint::parse("http://127.0.0.1:8080/v1/").unwrap();
    assert_eq!(
        (e.host.as_str(), e.port, e.prefix.as_str()),
        ("127.0.0.1", 8080, "")
    );
    assert_eq!(
        e.full("/v1/completions"),
        "http://127.0.0.1:8080/v1/completions"
    );
    let e = Endpoint::parse("http://[::1]:9/proxy").unwrap();
    assert_eq!(
        (e.host.as_str(), e.port, e.prefix.as_str()),
        ("::1", 9, "/proxy")
    );
    assert_eq!(e.full("/v1/models"), "http://[::1]:9/proxy/v1/models");
    assert_eq!(Endpoint::parse("http://box").unwrap().port, 80);
    let err = Endpoint::parse("https://api.example.com").unwrap_err();
    assert!(matches!(err, BenchError::Https { .. }));
    assert!(err.to_string().contains("https is not supported"), "{err}");
    for bad in [
        "ftp://x",
        "localhost:8080",
        "http://:80",
        "http://h:0",
        "http://h:99999",
        "http://u:p@h",
        "http://h/?q",
    ] {
        assert!(
            matches!(Endpoint::parse(bad), Err(BenchError::BadUrl { .. })),
            "{bad}"
        );
    }
}

/// A CR, LF, other control character or space anywhere in the URL would reach the request line or the Host
/// header as it is (issue 24: `--url 'http://h:8080/x\r\nX-Evil: 1'` sent the header): refused, naming the
/// character's position, with the URL quoted escaped.
#[test]
fn control_characters_and_spaces_in_a_url_are_refused() {
    for (bad, at, code) in [
        ("http://127.0.0.1:8080/x\r\nX-Evil: 1", 24, "U+000D"),
        ("http://127.0.0.1:8080/x\nX-Evil: 1", 24, "U+000A"),
        ("http://h\x1b]0;pwned\x07:80", 9, "U+001B"),
        ("http://h:80/a b", 14, "U+0020"),
        ("http://h:80/\u{85}", 13, "U+0085"),
        ("http://h:80/\x7f", 13, "U+007F"),
        ("http://h:80/\t", 13, "U+0009"),
    ] {
        let e = Endpoint::parse(bad).unwrap_err();
        let BenchError::BadUrl { url, why } = &e else {
            panic!("{bad:?}: {e:?}")
        };
        assert!(
            why.contains("--url") && why.contains(&format!("character {at} is {code}")),
            "{bad:?}: {why}"
        );
        assert!(!url.chars().any(char::is_control), "escaped: {url:?}");
        assert!(e.is_usage());
    }
}

#[test]
fn chunked_bodies_are_deframed_with_extensions_and_trailers() {
    let chunked = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n";
    let raw = [
        &chunked[..],
        b"5;ext=1\r\nhello\r\n7\r\n, world\r\n0\r\nX-Trailer: 1\r\n\r\n",
    ]
    .concat();
    assert_eq!(body_of(&raw).unwrap(), b"hello, world");
    // Hex sizes above 9.
    let mut raw = [&chunked[..], b"1a\r\n"].concat();
    raw.extend_from_slice(&[b'x'; 26]);
    raw.extend_from_slice(b"\r\n0\r\n\r\n");
    assert_eq!(body_of(&raw).unwrap().len(), 26);
}

#[test]
fn malformed_chunked_bodies_are_errors_of_their_kind() {
    let chunked = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n";
    for (body, truncated) in [
        (&b"zz\r\nhello\r\n0\r\n\r\n"[..], false),
        (b"3\r\nhello\r\n0\r\n\r\n", false),
        (b"5\r\nhel", true),
        (b"5\r\nhello\r\n", true),
        (b"11111111111111111\r\n", false),
    ] {
        let e = body_of(&[&chunked[..], body].concat()).unwrap_err();
        let what = format!("{:?}: {e}", String::from_utf8_lossy(body));
        if truncated {
            assert!(matches!(e, BenchError::Truncated { .. }), "{what}");
        } else {
            assert!(matches!(e, BenchError::Malformed { .. }), "{what}");
        }
    }
}

#[test]
fn content_length_bodies_stop_at_the_length_and_short_ones_are_truncated() {
    assert_eq!(
        body_of(b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nhello, world").unwrap(),
        b"hello"
    );
    assert_eq!(
        body_of(b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n").unwrap(),
        b""
    );
    let e = body_of(b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nhel").unwrap_err();
    assert!(matches!(e, BenchError::Truncated { .. }), "{e}");
    assert_eq!(
        body_of(b"HTTP/1.1 200 OK\r\n\r\nto the end").unwrap(),
        b"to the end"
    );
}

#[test]
fn heads_give_status_framing_and_type_and_skip_informational_responses() {
    let raw = b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\nContent-Length: 5\r\n\r\n3\r\nabc\r\n0\r\n\r\n";
    let (status, content_type, body) = fetch(raw).unwrap();
    assert_eq!(status, 200);
    assert_eq!(content_type.as_deref(), Some("text/event-stream"));
    // Chunked framing wins over a Content-Length (RFC 9112 section 6.3).
    assert_eq!(body, b"abc");
    let cfg = answering(b"HTTP/1.0 503 Busy\r\ncontent-length: 3\r\n\r\nbad");
    let (_, head, _) = exchange(&cfg, "GET", "/x", &[], Duration::from_secs(10)).unwrap();
    assert_eq!(
        (head.status, head.reason.as_str()),
        (503, "Service Unavailable")
    );
    for bad in [
        &b"SSH-2.0-OpenSSH\r\n\r\n"[..],
        b"HTTP/1.1 abc OK\r\n\r\n",
        b"HTTP/1.1 200 OK\r\nno colon\r\n\r\n",
        b"HTTP/1.1 200 OK\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\n",
    ] {
        let e = fetch(bad).unwrap_err();
        assert!(
            matches!(e, BenchError::Malformed { .. }),
            "{}: {e}",
            String::from_utf8_lossy(bad)
        );
    }
    let e = fetch(b"HTTP/1.1 200 OK\r\nServer: x\r\n").unwrap_err();
    assert!(matches!(e, BenchError::Truncated { .. }), "{e}");
    let mut huge = b"HTTP/1.1 200 OK\r\n".to_vec();
    for _ in 0..2000 {
        huge.extend_from_slice(b"X-Padding: 0123456789012345678901234567890123456789\r\n");
    }
    let e = fetch(&huge).unwrap_err();
    assert!(
        matches!(e, BenchError::Malformed { .. }) && e.to_string().contains("too many headers"),
        "{e}"
    );
    // One header of 128 KiB: refused past 64 KiB of head, before the rest is held.
    let mut huge = b"HTTP/1.1 200 OK\r\nX-Padding: ".to_vec();
    huge.resize(huge.len() + (128 << 10), b'a');
    huge.extend_from_slice(b"\r\n\r\n");
    let e = fetch(&huge).unwrap_err();
    assert!(
        matches!(e, BenchError::Malformed { .. })
            && e.to_string().contains("a response head over 65536 bytes"),
        "{e}"
    );
}

#[test]
fn events_join_data_lines_and_skip_comments_and_fields() {
    let raw = b": ping\r\nevent: message\r\ndata: {\"a\":\r\ndata: 1}\r\n\r\ndata:[DONE]\n\n";
    let mut r = Cursor::new(&raw[..]);
    let mut line = Vec::new();
    assert_eq!(
        next_event(&mut r, &mut line).unwrap().as_deref(),
        Some("{\"a\":\n1}")
    );
    assert_eq!(
        next_event(&mut r, &mut line).unwrap().as_deref(),
        Some("[DONE]")
    );
    assert_eq!(next_event(&mut r, &mut line).unwrap(), None);
    let e = next_event(&mut Cursor::new(&b"{\"not\": \"sse\"}\n"[..]), &mut line).unwrap_err();
    assert!(e.to_string().contains("not an event stream"), "{e}");
}

#[test]
fn stats_use_the_middle_and_the_nearest_rank() {
    let s = Stats::of(&[5.0, 1.0, 3.0, 2.0, 4.0]).unwrap();
    assert_eq!(
        (s.median, s.p90, s.min, s.max, s.mean),
        (3.0, 5.0, 1.0, 5.0, 3.0)
    );
    let s = Stats::of(&(1..=10).map(f64::from).collect::<Vec<_>>()).unwrap();
    assert_eq!((s.median, s.p90), (5.5, 9.0));
    assert_eq!(Stats::of(&[]), None);
    assert_eq!(Stats::of(&[7.0]).unwrap().p90, 7.0);
}

fn sample(sent_ms: u64, first_ms: u64, last_ms: u64, tokens: u64, usage: bool) -> Sample {
    Sample {
        sent: Duration::from_millis(sent_ms),
        first_token: Duration::from_millis(first_ms),
        last_token: Duration::from_millis(last_ms),
        chunks: tokens,
        usage_completion_tokens: usage.then_some(tokens),
        usage_prompt_tokens: usage.then_some(100),
        server_decode_tokens_per_s: None,
        fingerprint: None,
    }
}

#[test]
fn decode_rate_is_tokens_over_the_union_of_decode_intervals() {
    // Two requests decoding together for 1 s (11 tokens each: 10 after the first): 20 tokens/s.
    let together = [
        sample(0, 100, 1100, 11, true),
        sample(0, 100, 1100, 11, true),
    ];
    let l = summarize(2, &together, Duration::from_millis(1200)).unwrap();
    assert!((l.decode_tokens_per_s.unwrap() - 20.0).abs() < 1e-9);
    assert!((l.tpot_ms.unwrap().median - 100.0).abs() < 1e-9);
    assert_eq!(l.tokens_counted_from, TokenCount::Usage);
    assert_eq!(l.prompt_tokens, Some(100));
    // The same two queued one after the other (one slot): 10 tokens/s, not 20.
    let queued = [
        sample(0, 100, 1100, 11, false),
        sample(0, 1200, 2200, 11, false),
    ];
    let l = summarize(2, &queued, Duration::from_millis(2300)).unwrap();
    assert!((l.decode_tokens_per_s.unwrap() - 10.0).abs() < 1e-9);
    assert_eq!(l.ttft_ms.median, 650.0);
    assert_eq!(l.tokens_counted_from, TokenCount::Chunks);
    assert_eq!(l.prompt_tokens, None);
    // One token each: no TPOT, no decode rate.
    let l = summarize(1, &[sample(0, 50, 50, 1, true)], Duration::from_millis(60)).unwrap();
    assert_eq!((l.tpot_ms, l.decode_tokens_per_s), (None, None));
}

#[test]
fn the_request_deadline_grows_with_tokens_and_requests_in_flight_and_saturates() {
    let mut cfg = Config {
        endpoint: Endpoint::parse("http://127.0.0.1:1").unwrap(),
        chat: false,
        served_model: None,
        prompt_tokens: 100,
        max_tokens: 20,
        concurrency: vec![1],
        requests: 1,
        warmup: 0,
        strict_openai: false,
        token_ids: false,
        timeouts: Timeouts::new(Duration::from_secs(10)),
    };
    assert_eq!(cfg.request_limit(1), Duration::from_secs(130));
    assert_eq!(cfg.request_limit(4), Duration::from_secs(490));
    cfg.prompt_tokens = MAX_PROMPT_TOKENS;
    cfg.max_tokens = MAX_NEW_TOKENS;
    assert_eq!(
        cfg.request_limit(MAX_CONCURRENCY),
        Duration::from_secs(10) + MAX_TIMEOUT
    );
    assert!(cfg.validate().is_ok());
    cfg.concurrency = vec![0];
    assert!(cfg.validate().unwrap_err().is_usage());
}

/// `ureq` follows up to 10 redirects unless told not to: the benchmark measures the server at `--url`, so a 3xx is
/// the answer (and the error), and nothing else is contacted.
#[test]
fn a_redirect_is_the_answer_and_is_not_followed() {
    let elsewhere = TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).unwrap();
    elsewhere.set_nonblocking(true).unwrap();
    let to = elsewhere.local_addr().unwrap();
    let cfg = answering(
        format!("HTTP/1.1 302 Found\r\nLocation: http://{to}/x\r\nContent-Length: 0\r\n\r\n")
            .as_bytes(),
    );
    let (_, head, _) = exchange(&cfg, "GET", "/x", &[], Duration::from_secs(10)).unwrap();
    assert_eq!((head.status, head.reason.as_str()), (302, "Found"));
    assert!(elsewhere.accept().is_err(), "the redirect was followed");
}
