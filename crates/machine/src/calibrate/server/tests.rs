//! Unit tests of the server benchmark: URL parsing, HTTP de-framing, event parsing, statistics and deadlines.

use super::http::{Body, Framing, Head, next_event, read_head};
use super::*;
use std::io::{Cursor, Read};

fn head(framing: Framing) -> Head {
    Head {
        status: 200,
        reason: "OK".into(),
        content_type: None,
        framing,
    }
}

fn body_of(bytes: &[u8], framing: Framing) -> io::Result<Vec<u8>> {
    let mut b = Body::new(Cursor::new(bytes.to_vec()), &head(framing));
    let mut out = Vec::new();
    b.read_to_end(&mut out)?;
    Ok(out)
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
    let raw = b"5;ext=1\r\nhello\r\n7\r\n, world\r\n0\r\nX-Trailer: 1\r\n\r\n";
    assert_eq!(body_of(raw, Framing::Chunked).unwrap(), b"hello, world");
    // Hex sizes above 9.
    let mut raw = b"1a\r\n".to_vec();
    raw.extend_from_slice(&[b'x'; 26]);
    raw.extend_from_slice(b"\r\n0\r\n\r\n");
    assert_eq!(body_of(&raw, Framing::Chunked).unwrap().len(), 26);
}

#[test]
fn malformed_chunked_bodies_are_errors_of_their_kind() {
    for (raw, kind) in [
        (&b"zz\r\nhello\r\n0\r\n\r\n"[..], io::ErrorKind::InvalidData),
        (b"3\r\nhello\r\n0\r\n\r\n", io::ErrorKind::InvalidData),
        (b"5\r\nhel", io::ErrorKind::UnexpectedEof),
        (b"5\r\nhello\r\n", io::ErrorKind::UnexpectedEof),
        (b"11111111111111111\r\n", io::ErrorKind::InvalidData),
    ] {
        let e = body_of(raw, Framing::Chunked).unwrap_err();
        assert_eq!(e.kind(), kind, "{:?}: {e}", String::from_utf8_lossy(raw));
    }
}

#[test]
fn content_length_bodies_stop_at_the_length_and_short_ones_are_truncated() {
    assert_eq!(
        body_of(b"hello, world", Framing::Length(5)).unwrap(),
        b"hello"
    );
    assert_eq!(body_of(b"", Framing::Length(0)).unwrap(), b"");
    let e = body_of(b"hel", Framing::Length(5)).unwrap_err();
    assert_eq!(e.kind(), io::ErrorKind::UnexpectedEof);
    assert_eq!(body_of(b"to the end", Framing::Eof).unwrap(), b"to the end");
}

#[test]
fn heads_give_status_framing_and_type_and_skip_informational_responses() {
    let raw = b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\nContent-Length: 5\r\n\r\nrest";
    let mut r = Cursor::new(&raw[..]);
    let h = read_head(&mut r).unwrap();
    assert_eq!(h.status, 200);
    assert_eq!(h.framing, Framing::Chunked);
    assert_eq!(h.content_type.as_deref(), Some("text/event-stream"));
    let h = read_head(&mut Cursor::new(
        &b"HTTP/1.0 503 Busy\r\ncontent-length: 3\r\n\r\n"[..],
    ))
    .unwrap();
    assert_eq!(
        (h.status, h.reason.as_str(), h.framing),
        (503, "Busy", Framing::Length(3))
    );
    for bad in [
        &b"SSH-2.0-OpenSSH\r\n\r\n"[..],
        b"HTTP/1.1 abc OK\r\n\r\n",
        b"HTTP/1.1 200 OK\r\nno colon\r\n\r\n",
        b"HTTP/1.1 200 OK\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\n",
    ] {
        let e = read_head(&mut Cursor::new(bad)).unwrap_err();
        assert_eq!(
            e.kind(),
            io::ErrorKind::InvalidData,
            "{}",
            String::from_utf8_lossy(bad)
        );
    }
    let e = read_head(&mut Cursor::new(&b"HTTP/1.1 200 OK\r\nServer: x\r\n"[..])).unwrap_err();
    assert_eq!(e.kind(), io::ErrorKind::UnexpectedEof);
    let mut huge = b"HTTP/1.1 200 OK\r\n".to_vec();
    for _ in 0..2000 {
        huge.extend_from_slice(b"X-Padding: 0123456789012345678901234567890123456789\r\n");
    }
    let e = read_head(&mut Cursor::new(&huge[..])).unwrap_err();
    assert!(e.to_string().contains("response head over"), "{e}");
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
