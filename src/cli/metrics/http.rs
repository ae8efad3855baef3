//! Just enough HTTP/1.x for a Prometheus scrape: `GET /metrics` answered, any other
//! path 404, any other method 405, and every connection closed after one answer.
//!
//! A client cannot hold the watch or grow its memory: each connection is served by a
//! thread of its own (the accept loop never reads), at most MAX_CONNECTIONS at once
//! (more are answered 503 and closed at once), and its request must be complete within
//! REQUEST_TIME and MAX_HEAD bytes (else 408 or 431). The watch loop is another thread
//! and shares only counters with these.

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::exposition::CONTENT_TYPE;

/// A scrape's request line and headers are a few hundred bytes.
pub const MAX_HEAD: usize = 8 * 1024;
/// From accept to the end of the headers, and for writing the answer.
pub const REQUEST_TIME: Duration = Duration::from_secs(2);
/// Connections served at once; Prometheus scrapes one at a time.
pub const MAX_CONNECTIONS: usize = 4;

/// What the connection asked for, once its head is read.
#[derive(Debug, PartialEq, Eq)]
pub enum Request {
    Metrics,
    /// (status line, body)
    Refused(&'static str, &'static str),
}

/// The answer to a request head (the bytes up to and including the blank line).
pub fn route(head: &[u8]) -> Request {
    let line = head.split(|b| *b == b'\n').next().unwrap_or_default();
    let line = String::from_utf8_lossy(line);
    let mut words = line.trim_end_matches('\r').split(' ');
    let (Some(method), Some(target), Some(version), None) =
        (words.next(), words.next(), words.next(), words.next())
    else {
        return Request::Refused("400 Bad Request", "not an HTTP request\n");
    };
    if !version.starts_with("HTTP/1.") {
        return Request::Refused("400 Bad Request", "HTTP/1.x only\n");
    }
    // A query string (?x=y) is allowed and ignored, as exporters do.
    let path = target.split('?').next().unwrap_or_default();
    if path != "/metrics" {
        return Request::Refused("404 Not Found", "only /metrics is served here\n");
    }
    match method {
        "GET" => Request::Metrics,
        _ => Request::Refused("405 Method Not Allowed", "only GET /metrics\n"),
    }
}

/// Where the head ends, if it has.
fn head_end(bytes: &[u8]) -> Option<usize> {
    bytes
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .map(|i| i + 4)
}

enum Head {
    Read(Vec<u8>),
    TooLarge,
    TooSlow,
    Closed,
}

/// The request head, read within REQUEST_TIME in all (not per read: a client
/// trickling a byte a second is cut off too) and MAX_HEAD bytes.
fn read_head(stream: &mut TcpStream) -> Head {
    let deadline = Instant::now() + REQUEST_TIME;
    let mut bytes = Vec::with_capacity(1024);
    let mut chunk = [0u8; 1024];
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() || stream.set_read_timeout(Some(left)).is_err() {
            return Head::TooSlow;
        }
        match stream.read(&mut chunk) {
            Ok(0) => return Head::Closed,
            Ok(n) => bytes.extend_from_slice(&chunk[..n]),
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(e)
                if matches!(
                    e.kind(),
                    std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                ) =>
            {
                return Head::TooSlow
            }
            Err(_) => return Head::Closed,
        }
        if let Some(end) = head_end(&bytes) {
            bytes.truncate(end);
            return Head::Read(bytes);
        }
        if bytes.len() > MAX_HEAD {
            return Head::TooLarge;
        }
    }
}

fn answer(stream: &mut TcpStream, status: &str, content_type: &str, body: &[u8]) {
    let head = format!(
        "HTTP/1.1 {status}\r\nContent-Type: {content_type}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
        body.len()
    );
    // A client gone or too slow to read loses its answer; nothing else depends on it.
    let _ = stream.set_write_timeout(Some(REQUEST_TIME));
    let _ = stream
        .write_all(head.as_bytes())
        .and_then(|()| stream.write_all(body))
        .and_then(|()| stream.flush());
}

fn connection(mut stream: TcpStream, page: &(dyn Fn() -> String + Send + Sync)) {
    let text = "text/plain; charset=utf-8";
    match read_head(&mut stream) {
        Head::Read(head) => match route(&head) {
            Request::Metrics => answer(&mut stream, "200 OK", CONTENT_TYPE, page().as_bytes()),
            Request::Refused(status, body) => answer(&mut stream, status, text, body.as_bytes()),
        },
        Head::TooLarge => answer(
            &mut stream,
            "431 Request Header Fields Too Large",
            text,
            b"request head over 8 KiB\n",
        ),
        Head::TooSlow => answer(
            &mut stream,
            "408 Request Timeout",
            text,
            b"request not complete within 2 s\n",
        ),
        Head::Closed => return,
    }
    let _ = stream.shutdown(std::net::Shutdown::Write);
    drain(&mut stream);
}

/// What the client still sends, read and dropped (at most a few KiB, for at most
/// REQUEST_TIME) before closing: closing with unread bytes makes the kernel reset the
/// connection, and the client would lose the answer (a 431 above all).
fn drain(stream: &mut TcpStream) {
    let deadline = Instant::now() + REQUEST_TIME;
    let mut chunk = [0u8; 1024];
    for _ in 0..64 {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() || stream.set_read_timeout(Some(left)).is_err() {
            return;
        }
        match stream.read(&mut chunk) {
            Ok(0) | Err(_) => return,
            Ok(_) => {}
        }
    }
}

/// The accept loop, for ever (the thread ends with the process).
pub fn serve(listener: TcpListener, page: Arc<dyn Fn() -> String + Send + Sync>) {
    let active = Arc::new(AtomicUsize::new(0));
    for stream in listener.incoming() {
        let Ok(mut stream) = stream else {
            // EMFILE and the like: a short pause instead of a busy loop.
            std::thread::sleep(Duration::from_millis(50));
            continue;
        };
        if active.fetch_add(1, Ordering::AcqRel) >= MAX_CONNECTIONS {
            active.fetch_sub(1, Ordering::AcqRel);
            answer(
                &mut stream,
                "503 Service Unavailable",
                "text/plain; charset=utf-8",
                b"too many connections\n",
            );
            continue;
        }
        let (page, served) = (Arc::clone(&page), Arc::clone(&active));
        let spawned = std::thread::Builder::new()
            .name("metrics-conn".into())
            .spawn(move || {
                connection(stream, &*page);
                served.fetch_sub(1, Ordering::AcqRel);
            });
        if spawned.is_err() {
            active.fetch_sub(1, Ordering::AcqRel);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_get_metrics_is_served() {
        assert_eq!(
            route(b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n"),
            Request::Metrics
        );
        assert_eq!(
            route(b"GET /metrics?a=b HTTP/1.0\r\n\r\n"),
            Request::Metrics
        );
        let status = |head: &[u8]| match route(head) {
            Request::Refused(status, _) => status,
            Request::Metrics => "200",
        };
        assert_eq!(status(b"GET / HTTP/1.1\r\n\r\n"), "404 Not Found");
        assert_eq!(status(b"GET /metricsx HTTP/1.1\r\n\r\n"), "404 Not Found");
        assert_eq!(
            status(b"POST /metrics HTTP/1.1\r\n\r\n"),
            "405 Method Not Allowed"
        );
        assert_eq!(
            status(b"HEAD /metrics HTTP/1.1\r\n\r\n"),
            "405 Method Not Allowed"
        );
        assert_eq!(status(b"GET /metrics\r\n\r\n"), "400 Bad Request");
        assert_eq!(status(b"GET /metrics SPDY/3\r\n\r\n"), "400 Bad Request");
        assert_eq!(status(b"\x16\x03\x01 tls\r\n\r\n"), "400 Bad Request");
    }

    fn get(addr: std::net::SocketAddr, request: &[u8]) -> String {
        let mut s = TcpStream::connect(addr).unwrap();
        s.write_all(request).unwrap();
        let mut out = String::new();
        s.read_to_string(&mut out).unwrap();
        out
    }

    /// A client that sends nothing holds one connection until its time is up; the
    /// others are answered meanwhile, and an oversized head is refused.
    #[test]
    fn a_silent_client_does_not_hold_the_others_and_a_huge_head_is_refused() {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        std::thread::spawn(move || serve(listener, Arc::new(|| "up 1\n".to_string())));
        let silent = TcpStream::connect(addr).unwrap();
        let start = Instant::now();
        let ok = get(addr, b"GET /metrics HTTP/1.1\r\n\r\n");
        assert!(
            ok.starts_with("HTTP/1.1 200 OK\r\n") && ok.ends_with("\r\n\r\nup 1\n"),
            "{ok}"
        );
        assert!(
            ok.contains("Content-Type: text/plain; version=0.0.4"),
            "{ok}"
        );
        assert!(
            start.elapsed() < Duration::from_secs(1),
            "{:?}",
            start.elapsed()
        );
        let mut huge = b"GET /metrics HTTP/1.1\r\n".to_vec();
        huge.extend(std::iter::repeat_n(b"X-Pad: aaaaaaaaaaaaaaaa\r\n", 600).flatten());
        let refused = get(addr, &huge);
        assert!(refused.starts_with("HTTP/1.1 431 "), "{refused}");
        let mut silent = silent;
        let mut out = String::new();
        silent.read_to_string(&mut out).unwrap();
        assert!(out.starts_with("HTTP/1.1 408 "), "{out}");
        let held = start.elapsed();
        assert!(held >= REQUEST_TIME && held < REQUEST_TIME * 2, "{held:?}");
    }
}
