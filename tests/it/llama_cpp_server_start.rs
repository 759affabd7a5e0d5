//! The pinned llama-server starts from the argv a plan emits, as written: for a few presets on a fixture model,
//! the document's `launch.llama_server.argv` (its `--host 0.0.0.0 --port 8080` rewritten to
//! `--host 127.0.0.1 --port <free port>`: loopback only, and a port no other run holds) is run until
//! `GET /health` answers 200, then the server is killed. The embedding preset's `--embedding --pooling` and
//! the `--alias` start too.
//!
//! It needs a build of the pinned engine's llama-server (tests/fixtures/llama-cpp/README.md says how); without
//! `LLAMA_SERVER=/path/to/llama-server` it prints why and passes, so the normal test run needs no binary (the
//! argument-table check in tests/it/llama_cpp_argv_table.rs covers that part).

use crate::common;
use common::server::{REQUEST_TIMEOUT, Server, free_port, loopback_args};
use common::{fixture, inventory, profiles};

use std::io::{Read, Write};
use std::net::{Ipv4Addr, SocketAddr, TcpStream};

use optimizer::model;
use optimizer::plan::Overrides;

/// The whole response to a request (`Connection: close`), or None when nothing answers.
fn request(port: u16, head: &str, body: &str) -> Option<String> {
    let addr = SocketAddr::from((Ipv4Addr::LOCALHOST, port));
    let mut s = TcpStream::connect_timeout(&addr, REQUEST_TIMEOUT).ok()?;
    s.set_read_timeout(Some(REQUEST_TIMEOUT)).ok()?;
    s.write_all(
        format!(
            "{head} HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
            body.len()
        )
        .as_bytes(),
    )
    .ok()?;
    let mut out = String::new();
    s.read_to_string(&mut out).ok()?;
    Some(out)
}

#[test]
fn the_pinned_llama_server_starts_from_emitted_argv() {
    let Some(server) = std::env::var_os("LLAMA_SERVER").filter(|v| !v.is_empty()) else {
        eprintln!(
            "skipped: set LLAMA_SERVER to the pinned llama-server binary to start it from emitted argv \
             (tests/fixtures/llama-cpp/README.md)"
        );
        return;
    };
    let set = profiles();
    // The engine here is a CPU build: plan for the host of the CPU fixture inventory.
    let inv = inventory("cpu-server.yaml");
    let mut report = Vec::new();
    for (gguf, workload) in [
        ("llama-q4_k_m.gguf", "inference"),
        ("llama-q4_k_m.gguf", "chat"),
        ("qwen2-q4_0.gguf", "batch-inference"),
        ("mixtral-moe-q4_k.gguf", "long-context"),
        ("llama-q4_k_m.gguf", "embedding"),
    ] {
        let path = fixture("gguf").join(gguf);
        let spec = model::load(&path).unwrap();
        let label = path.display().to_string();
        let doc = common::plan(&spec, &label, &inv, &set, workload, &Overrides::default()).unwrap();
        let argv = &common::artifact(&doc, "llama-server").argv;
        assert_eq!(argv[0], "llama-server", "{workload}: program");
        let port = free_port();
        let args = loopback_args(argv, port).unwrap_or_else(|e| panic!("{workload}: {e}"));
        let (running, health) = Server::start(&server, &args, port);
        // The server answers under the planned alias, and an embedding plan serves embeddings.
        let outcome = health.and_then(|t| {
            let alias = &argv[argv.iter().position(|a| a == "--alias").unwrap() + 1];
            let models = request(port, "GET /v1/models", "").unwrap_or_default();
            if !models.contains(&format!("\"id\":\"{alias}\"")) {
                return Err(format!("/v1/models does not list {alias:?}: {models}"));
            }
            if workload == "embedding" {
                let r = request(
                    port,
                    "POST /v1/embeddings",
                    &format!("{{\"model\":\"{alias}\",\"input\":\"hello world\"}}"),
                )
                .unwrap_or_default();
                if !r.starts_with("HTTP/1.1 200") || !r.contains("\"embedding\"") {
                    return Err(format!("POST /v1/embeddings: {r}"));
                }
            }
            Ok(t)
        });
        let text = running.stop();
        match outcome {
            Ok(t) => report.push(format!(
                "{gguf} {workload}: /health 200 after {:.1} s with {:?}",
                t.as_secs_f64(),
                &argv[3..]
            )),
            Err(e) => {
                let tail: Vec<&str> = text.lines().rev().take(15).collect();
                panic!(
                    "{gguf} {workload}: llama-server {argv:?} {e}; its log ends:\n{}",
                    tail.into_iter().rev().collect::<Vec<_>>().join("\n")
                );
            }
        }
    }
    eprintln!("{}", report.join("\n"));
}
