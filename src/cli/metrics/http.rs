//! Just enough HTTP/1.x for a Prometheus scrape: `GET /metrics` answered, any other
//! path 404, any other method 405, and every connection closed after one answer. What
//! the bytes mean, only: connection.rs moves them, listener.rs bounds the connections.

/// A scrape's request line and headers are a few hundred bytes.
pub const MAX_HEAD: usize = 8 * 1024;
/// The media type of every answer but the exposition.
pub const TEXT: &str = "text/plain; charset=utf-8";

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
pub fn head_end(bytes: &[u8]) -> Option<usize> {
    bytes
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .map(|i| i + 4)
}

/// The head of an answer with `body_len` bytes of body; every connection is closed
/// after one answer, and says so.
pub fn response_head(status: &str, content_type: &str, body_len: usize) -> Vec<u8> {
    format!(
        "HTTP/1.1 {status}\r\nContent-Type: {content_type}\r\nContent-Length: {body_len}\r\nConnection: close\r\n\r\n"
    )
    .into_bytes()
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
}
