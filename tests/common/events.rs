//! A live event stream read message by message, for tests that act while it is open.

use serde_json::Value;

use super::{Call, client, within};

/// Reads server-sent events from a live response.
pub struct Events {
    response: reqwest::Response,
    /// What was read and not yet taken as a message, as it came: for tests of what is no
    /// message, such as keep-alive comments.
    pub buffer: String,
}

impl Events {
    /// Posts `call` to `url`, asserting the answer is a 200 event stream.
    pub async fn open(url: &str, call: &Call) -> Events {
        let mut request = client().post(url);
        for (name, value) in &call.headers {
            request = request.header(name.as_str(), value.as_str());
        }
        let response = within(
            "the stream's response headers",
            request.json(&call.body).send(),
        )
        .await
        .unwrap();
        assert_eq!(response.status(), 200);
        assert!(
            response.headers()["content-type"]
                .to_str()
                .unwrap()
                .starts_with("text/event-stream")
        );
        Events {
            response,
            buffer: String::new(),
        }
    }

    /// The next complete event in the buffer, skipping comment-only events (keep-alives).
    fn buffered(&mut self) -> Option<Value> {
        while let Some(end) = self.buffer.find("\n\n") {
            let event: String = self.buffer.drain(..end + 2).collect();
            if let Some(data) = event.lines().find_map(|l| l.strip_prefix("data:")) {
                return Some(serde_json::from_str(data.trim()).unwrap());
            }
        }
        None
    }

    /// Reads one more chunk: `false` when the stream ended cleanly. A transport error fails the
    /// test.
    pub async fn read_chunk(&mut self) -> bool {
        match self.response.chunk().await {
            Ok(Some(chunk)) => {
                self.buffer.push_str(&String::from_utf8_lossy(&chunk));
                true
            }
            Ok(None) => false,
            Err(error) => panic!("the stream failed: {error}"),
        }
    }

    /// The next message. The stream ending first, failing, or staying without a message for a
    /// whole test step (keep-alive comments do not count) fails the test.
    pub async fn next(&mut self) -> Value {
        within("the next event of the stream", async {
            loop {
                if let Some(message) = self.buffered() {
                    return message;
                }
                if !self.read_chunk().await {
                    panic!("the stream ended while a message was expected");
                }
            }
        })
        .await
    }

    /// Asserts the stream ends cleanly, within a test step, with no further message.
    pub async fn end(&mut self) {
        within("the end of the stream", async {
            loop {
                if let Some(message) = self.buffered() {
                    panic!("expected the stream to end, got {message}");
                }
                if !self.read_chunk().await {
                    assert!(
                        self.buffer.trim().is_empty(),
                        "the stream ended inside an event: {:?}",
                        self.buffer
                    );
                    return;
                }
            }
        })
        .await
    }
}
