//! What a tool call returns: content blocks, structured content, and the error flag.

use serde::Serialize;
use serde_json::{Map, Value};

/// One block of unstructured tool output.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(tag = "type", rename_all = "snake_case")]
#[non_exhaustive]
pub enum Content {
    /// Plain text.
    Text {
        /// The text.
        text: String,
    },
    /// A base64-encoded image.
    Image {
        /// Base64 data.
        data: String,
        /// e.g. `image/png`.
        #[serde(rename = "mimeType")]
        mime_type: String,
    },
    /// Base64-encoded audio.
    Audio {
        /// Base64 data.
        data: String,
        /// e.g. `audio/wav`.
        #[serde(rename = "mimeType")]
        mime_type: String,
    },
    /// A link to a resource the client may read.
    ResourceLink {
        /// The resource URI.
        uri: String,
        /// The resource name.
        name: String,
        /// Optional description.
        #[serde(skip_serializing_if = "Option::is_none")]
        description: Option<String>,
        /// Optional media type.
        #[serde(rename = "mimeType", skip_serializing_if = "Option::is_none")]
        mime_type: Option<String>,
    },
    /// An embedded resource (`{uri, mimeType?, text}` or `{uri, mimeType?, blob}`).
    Resource {
        /// The resource contents.
        resource: Value,
    },
}

impl Content {
    /// A text block.
    pub fn text(text: impl Into<String>) -> Self {
        Content::Text { text: text.into() }
    }

    /// About how many bytes `blocks` take as JSON, a capacity to write them into: their
    /// strings with an eighth more for escapes (a quote or a newline in eight characters),
    /// and each block's keys. An embedded resource counts its keys only, and text dense in
    /// control characters (six bytes each) comes out longer: the buffer then grows.
    pub(crate) fn size_hint(blocks: &[Content]) -> usize {
        blocks
            .iter()
            .map(|block| {
                let payload = match block {
                    Content::Text { text } => text.len(),
                    Content::Image { data, mime_type } | Content::Audio { data, mime_type } => {
                        data.len() + mime_type.len()
                    }
                    Content::ResourceLink {
                        uri,
                        name,
                        description,
                        mime_type,
                    } => {
                        uri.len()
                            + name.len()
                            + description.as_ref().map_or(0, String::len)
                            + mime_type.as_ref().map_or(0, String::len)
                    }
                    Content::Resource { .. } => 0,
                };
                payload + payload / 8 + 64
            })
            .sum()
    }
}

/// The result of a `tools/call`.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
#[non_exhaustive]
pub struct CallToolResult {
    /// Unstructured content, always present (possibly empty).
    pub content: Vec<Content>,
    /// Structured content; must match the tool's output schema when it has one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub structured_content: Option<Value>,
    /// Whether the call ended in an error the model should see and correct.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub is_error: bool,
    /// Result metadata.
    #[serde(rename = "_meta", skip_serializing_if = "Option::is_none")]
    pub meta: Option<Map<String, Value>>,
}

impl CallToolResult {
    /// A successful result with the given content.
    pub fn success(content: Vec<Content>) -> Self {
        CallToolResult {
            content,
            ..Default::default()
        }
    }

    /// A successful result with one text block.
    pub fn text(text: impl Into<String>) -> Self {
        Self::success(vec![Content::text(text)])
    }

    /// A successful result carrying `structured` and its JSON text as a mirror for clients that
    /// only read content.
    pub fn structured(structured: Value) -> Self {
        CallToolResult {
            content: vec![Content::text(super::json_text(&structured))],
            structured_content: Some(structured),
            ..Default::default()
        }
    }

    /// Marks the result as an error.
    pub fn into_error(mut self) -> Self {
        self.is_error = true;
        self
    }
}

#[cfg(test)]
mod tests {

    use super::*;

    /// The size hint covers what the usual blocks take as JSON, so a result body allocated
    /// from it is written without growing: text of any length (up to one escape in eight
    /// characters), media data, links.
    #[test]
    fn the_size_hint_covers_the_usual_blocks() {
        let texts = [
            String::new(),
            "x".into(),
            "Applied: bsk_42 is now at version 2.".into(),
            "a \"word\" in a line of text\n".repeat(200),
            // One escape in eight characters, the density the hint allows for.
            "seven c\n".repeat(500),
        ];
        let mut blocks: Vec<Content> = texts.iter().map(Content::text).collect();
        blocks.extend([
            Content::Image {
                data: "iVBORw0KGgo".repeat(40),
                mime_type: "image/png".into(),
            },
            Content::Audio {
                data: "UklGRiQAAABXQVZF".repeat(64),
                mime_type: "audio/wav".into(),
            },
            Content::ResourceLink {
                uri: "mem://baskets/bsk_42".into(),
                name: "basket".into(),
                description: None,
                mime_type: None,
            },
            Content::ResourceLink {
                uri: "mem://baskets/bsk_42".into(),
                name: "basket".into(),
                description: Some("The \"basket\" of an order, \nwith its notes. ".repeat(20)),
                mime_type: Some("application/vnd.example.basket+json".into()),
            },
        ]);
        // Each block on its own: one block's spare bytes cannot hide another's shortfall.
        for (at, block) in blocks.into_iter().enumerate() {
            let block = [block];
            let written = serde_json::to_vec(&block).unwrap().len();
            let hint = Content::size_hint(&block);
            assert!(
                written <= hint,
                "block {at}: {written} bytes written, {hint} hinted"
            );
            assert!(
                hint <= written * 2 + 100,
                "block {at}: {hint} hinted for {written} bytes"
            );
        }
    }
}
