//! The one-page HTTP server `browser` runs the page from.

use super::*;

/// Standard base64 (the page inlines the module so it can run while loading).
pub(crate) fn base64(bytes: &[u8]) -> String {
    const A: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = String::with_capacity(bytes.len().div_ceil(3) * 4);
    for c in bytes.chunks(3) {
        let v = u32::from(c[0]) << 16 | u32::from(*c.get(1).unwrap_or(&0)) << 8 | u32::from(*c.get(2).unwrap_or(&0));
        for i in 0..4 {
            out.push(if i <= c.len() {
                char::from(A[(v >> (18 - 6 * i)) as usize & 63])
            } else {
                '='
            });
        }
    }
    out
}

/// Answers one HTTP GET for the page's files (`qlinear_web.js`, the modules
/// inlined as base64, from memory).
pub(crate) fn serve(mut stream: std::net::TcpStream, web: &Path, script: &[u8]) -> std::io::Result<()> {
    use std::io::{BufRead, BufReader, Write};
    let mut line = String::new();
    BufReader::new(&stream).read_line(&mut line)?;
    let path = line.split_whitespace().nth(1).unwrap_or("/").trim_start_matches('/');
    let (body, kind) = match path {
        "qlinear_web.js" => (script.to_vec(), "text/javascript"),
        "index.html" | "" => (std::fs::read(web.join("index.html"))?, "text/html"),
        "main.js" => (std::fs::read(web.join("main.js"))?, "text/javascript"),
        _ => (b"not found".to_vec(), "text/plain"),
    };
    write!(
        stream,
        "HTTP/1.1 200 OK\r\nContent-Type: {kind}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
        body.len()
    )?;
    stream.write_all(&body)
}
