//! The HTTP server the page runs from (`browser`, `serve`): `web/`'s files,
//! the wasm-bindgen builds, model files, and `POST /result`, on 127.0.0.1
//! only. Every answer carries the cross-origin isolation headers
//! (`Cross-Origin-Opener-Policy: same-origin`,
//! `Cross-Origin-Embedder-Policy: require-corp`), which give the page a
//! 5 µs `performance.now()` and, for threads, `SharedArrayBuffer`.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::mpsc::Sender;
use std::sync::Arc;

use super::browser::Build;
use super::*;

/// What the server offers.
pub(crate) struct Site {
    /// `web/`: `index.html`, `main.js`, `worker.js`.
    pub(crate) web: PathBuf,
    /// The builds, in the registry's order, served as `pkg/NAME/…` (their
    /// wasm-bindgen output, snippets included) and listed in `builds.json`.
    pub(crate) builds: Vec<Build>,
    /// Model files, served as `model/NAME`.
    pub(crate) models: Vec<(String, PathBuf)>,
    /// Folders served whole under a name (`NAME/…`): the peer's package.
    pub(crate) folders: Vec<(String, PathBuf)>,
    /// Where the bodies of `POST /result` go, if anywhere.
    pub(crate) results: Option<Sender<String>>,
}

/// Binds 127.0.0.1 on a free port and serves `site` from a thread (a
/// thread per connection); returns the port.
pub(crate) fn start(site: Site) -> Result<u16> {
    let listener = TcpListener::bind("127.0.0.1:0").map_err(|e| format!("bind 127.0.0.1: {e}"))?;
    let port = listener.local_addr().map_err(|e| e.to_string())?.port();
    let site = Arc::new(site);
    std::thread::spawn(move || {
        for stream in listener.incoming().flatten() {
            let site = Arc::clone(&site);
            std::thread::spawn(move || {
                let _ = answer(stream, &site);
            });
        }
    });
    Ok(port)
}

/// A file name the server may serve from a folder: one path component, no
/// way up.
fn plain(name: &str) -> bool {
    !name.is_empty() && !name.contains('/') && !name.contains('\\') && name != "." && name != ".."
}

/// Answers one request.
fn answer(stream: TcpStream, site: &Site) -> std::io::Result<()> {
    let mut reader = BufReader::new(&stream);
    let mut line = String::new();
    reader.read_line(&mut line)?;
    let mut words = line.split_whitespace();
    let (method, target) = (words.next().unwrap_or(""), words.next().unwrap_or("/"));
    let mut length = 0usize;
    let mut range: Option<(u64, Option<u64>)> = None;
    loop {
        let mut header = String::new();
        if reader.read_line(&mut header)? == 0 || header.trim().is_empty() {
            break;
        }
        if let Some((name, value)) = header.split_once(':') {
            if name.eq_ignore_ascii_case("content-length") {
                length = value.trim().parse().unwrap_or(0);
            }
            // `bytes=FROM-[TO]` (wllama reads a model in ranges)
            if name.eq_ignore_ascii_case("range") {
                range = value.trim().strip_prefix("bytes=").and_then(|r| {
                    let (from, to) = r.split_once('-')?;
                    Some((from.trim().parse().ok()?, to.trim().parse().ok()))
                });
            }
        }
    }
    let path = target.split('?').next().unwrap_or("").trim_start_matches('/');
    let mut out = &stream;
    if method == "POST" && path == "result" {
        let mut body = vec![0u8; length.min(64 << 20)];
        reader.read_exact(&mut body)?;
        if let Some(tx) = &site.results {
            let _ = tx.send(String::from_utf8_lossy(&body).into_owned());
        }
        return respond(&mut out, "200 OK", "text/plain", b"ok");
    }
    let file = match path.split('/').collect::<Vec<_>>().as_slice() {
        [""] | ["index.html"] => Some(site.web.join("index.html")),
        [name @ ("main.js" | "worker.js" | "wllama.html" | "wllama.js")] => Some(site.web.join(name)),
        ["builds.json"] => {
            let builds: Vec<String> = site
                .builds
                .iter()
                .map(|b| format!("{{\"name\": \"{}\", \"threads\": {}}}", b.name, b.threads))
                .collect();
            let body = format!("[{}]", builds.join(", "));
            return respond(&mut out, "200 OK", "application/json", body.as_bytes());
        }
        ["pkg", build, rest @ ..] if !rest.is_empty() && rest.iter().all(|p| plain(p)) => site
            .builds
            .iter()
            .find(|b| b.name == *build)
            .map(|b| rest.iter().fold(b.dir.clone(), |d, p| d.join(p))),
        [folder, rest @ ..]
            if !rest.is_empty() && rest.iter().all(|p| plain(p)) && site.folders.iter().any(|(f, _)| f == folder) =>
        {
            site.folders
                .iter()
                .find(|(f, _)| f == folder)
                .map(|(_, d)| rest.iter().fold(d.clone(), |d, p| d.join(p)))
        }
        ["model", name] => site.models.iter().find(|(m, _)| m == name).map(|(_, p)| p.clone()),
        _ => None,
    };
    let Some(file) = file else {
        return respond(&mut out, "404 Not Found", "text/plain", b"not found");
    };
    let Ok(mut f) = std::fs::File::open(&file) else {
        return respond(&mut out, "404 Not Found", "text/plain", b"not found");
    };
    let size = f.metadata()?.len();
    let kind = match file.extension().and_then(|e| e.to_str()) {
        Some("html") => "text/html; charset=utf-8",
        Some("js") => "text/javascript",
        Some("wasm") => "application/wasm",
        _ => "application/octet-stream",
    };
    match range {
        Some((from, to)) if from < size => {
            let to = to.unwrap_or(size - 1).min(size - 1).max(from);
            let n = to - from + 1;
            write!(
                out,
                "HTTP/1.1 206 Partial Content\r\nContent-Range: bytes {from}-{to}/{size}\r\n"
            )?;
            head_lines(&mut out, kind, n)?;
            if method != "HEAD" {
                std::io::Seek::seek(&mut f, std::io::SeekFrom::Start(from))?;
                std::io::copy(&mut (&mut f).take(n), &mut out)?;
            }
        }
        _ => {
            head(&mut out, "200 OK", kind, size)?;
            if method != "HEAD" {
                std::io::copy(&mut f, &mut out)?;
            }
        }
    }
    Ok(())
}

/// The status line and headers of an answer of `length` bytes.
fn head(out: &mut impl Write, status: &str, kind: &str, length: u64) -> std::io::Result<()> {
    write!(out, "HTTP/1.1 {status}\r\n")?;
    head_lines(out, kind, length)
}

/// The headers after the status line.
fn head_lines(out: &mut impl Write, kind: &str, length: u64) -> std::io::Result<()> {
    write!(
        out,
        "Content-Type: {kind}\r\nContent-Length: {length}\r\nAccept-Ranges: bytes\r\n\
         Cross-Origin-Opener-Policy: same-origin\r\nCross-Origin-Embedder-Policy: require-corp\r\n\
         Cross-Origin-Resource-Policy: same-origin\r\nCache-Control: no-store\r\nConnection: close\r\n\r\n"
    )
}

fn respond(out: &mut impl Write, status: &str, kind: &str, body: &[u8]) -> std::io::Result<()> {
    head(out, status, kind, body.len() as u64)?;
    out.write_all(body)
}
