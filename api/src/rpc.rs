//! JSON-RPC 2.0 framing shared by server and client: error codes, the error type, the
//! `Service` trait a daemon implements to answer requests, and streamed results
//! ([`Reply`], [`ReplyStream`]).

use serde::{Deserialize, Serialize};
use serde_json::Value;

/// Invalid JSON was received.
pub const PARSE_ERROR: i64 = -32700;
/// The JSON is not a valid request object (or the line is over the size limit, or a
/// batch over the batch limit).
pub const INVALID_REQUEST: i64 = -32600;
/// The method does not exist.
pub const METHOD_NOT_FOUND: i64 = -32601;
/// Invalid method parameters; the message names the field.
pub const INVALID_PARAMS: i64 = -32602;
/// The daemon failed to carry out a valid request.
pub const INTERNAL_ERROR: i64 = -32603;

/// A JSON-RPC error object.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, thiserror::Error)]
#[error("{message} (code {code})")]
pub struct RpcError {
    pub code: i64,
    pub message: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub data: Option<Value>,
}

impl RpcError {
    pub fn new(code: i64, message: impl Into<String>) -> Self {
        RpcError {
            code,
            message: message.into(),
            data: None,
        }
    }

    pub fn parse_error(detail: impl std::fmt::Display) -> Self {
        Self::new(PARSE_ERROR, format!("parse error: {detail}"))
    }

    pub fn invalid_request(detail: impl std::fmt::Display) -> Self {
        Self::new(INVALID_REQUEST, format!("invalid request: {detail}"))
    }

    pub fn method_not_found(method: &str) -> Self {
        Self::new(METHOD_NOT_FOUND, format!("method not found: `{method}`"))
    }

    /// Invalid params: `field` is the dotted path of the offending field (for example
    /// `tables[2].rules[0].dst_port`); it is also returned as `data.field`.
    pub fn invalid_params(field: &str, detail: impl std::fmt::Display) -> Self {
        RpcError {
            code: INVALID_PARAMS,
            message: format!("invalid params: `{field}`: {detail}"),
            data: Some(serde_json::json!({ "field": field })),
        }
    }

    pub fn internal(detail: impl std::fmt::Display) -> Self {
        Self::new(INTERNAL_ERROR, format!("internal error: {detail}"))
    }
}

/// Decodes `params` into `T`, mapping a serde error to an `INVALID_PARAMS` error that
/// names the field by its path (`ips[1]`, `tables[0].name`). Absent params (`null`)
/// decode as an empty object.
pub fn parse_params<T: serde::de::DeserializeOwned>(params: &Value) -> Result<T, RpcError> {
    let value = if params.is_null() {
        Value::Object(Default::default())
    } else {
        params.clone()
    };
    serde_path_to_error::deserialize(value).map_err(|e| {
        let path = e.path().to_string();
        let text = e.inner().to_string();
        // serde names the field in "missing field `x`" / "unknown field `x`"; the path
        // is that of the map holding it.
        let named = text.split('`').nth(1).filter(|_| text.contains("field `"));
        let field = match (path.as_str(), named) {
            ("." | "", Some(name)) => name.to_string(),
            ("." | "", None) => "params".to_string(),
            (path, Some(name)) if !path.ends_with(name) => format!("{path}.{name}"),
            (path, _) => path.to_string(),
        };
        RpcError::invalid_params(&field, text)
    })
}

/// Largest piece a [`ReplyStream`] is asked for at a time, in bytes (a piece may run
/// over by one element).
pub const STREAM_CHUNK: usize = 64 * 1024;

/// A method's result: a value, or JSON text produced piece by piece as the server
/// sends it ([`ReplyStream`]), for results too large to build whole.
pub enum Reply {
    /// The result, built.
    Value(Value),
    /// The result, written as it is sent.
    Stream(Box<dyn ReplyStream>),
}

impl std::fmt::Debug for Reply {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Reply::Value(v) => f.debug_tuple("Value").field(v).finish(),
            Reply::Stream(_) => f.write_str("Stream(..)"),
        }
    }
}

impl Reply {
    /// The whole result: a streamed one is run to its end and parsed (for tests and
    /// callers that want the value anyway).
    pub fn into_value(self) -> Result<Value, RpcError> {
        match self {
            Reply::Value(v) => Ok(v),
            Reply::Stream(mut stream) => {
                let text = stream_to_end(stream.as_mut())?;
                serde_json::from_slice(&text)
                    .map_err(|e| RpcError::internal(format!("streamed result is not JSON: {e}")))
            }
        }
    }
}

/// A result written as it is sent: the server asks for the next piece only while the
/// client's connection has room for it, so the result is never held whole. It owns
/// (shares) what it reads; it must not borrow the service.
pub trait ReplyStream: Send {
    /// Appends the next piece of the result's JSON text to `out`, about `chunk` bytes
    /// (at least one element, so it may run over by one), and returns whether the text
    /// is now complete. The pieces concatenated are one JSON value. An error after the
    /// first piece cannot be sent as an error reply: the server closes the connection.
    fn write_next(&mut self, out: &mut Vec<u8>, chunk: usize) -> Result<bool, RpcError>;
}

/// Runs `stream` to its end and returns the whole text.
pub fn stream_to_end(stream: &mut dyn ReplyStream) -> Result<Vec<u8>, RpcError> {
    let mut out = Vec::new();
    while !stream.write_next(&mut out, STREAM_CHUNK)? {}
    Ok(out)
}

/// What a daemon implements to answer control requests. `call` runs on the control
/// thread, one request at a time, and must never panic on bad input.
pub trait Service {
    /// Answers one request. `params` is `Value::Null` when the request had none.
    fn call(&mut self, method: &str, params: &Value) -> Result<Value, RpcError>;

    /// Answers one request, possibly with a streamed result; what the server calls. By
    /// default the result of [`Service::call`]. A service overrides it for the methods
    /// whose results can be large (`acl.dump`); errors must still be returned here,
    /// before the first piece is written.
    fn call_reply(&mut self, method: &str, params: &Value) -> Result<Reply, RpcError> {
        self.call(method, params).map(Reply::Value)
    }

    /// Periodic housekeeping on the control thread (link monitoring, freeing old
    /// generations); called at the server's tick interval whether or not requests came.
    fn tick(&mut self) {}
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde::Deserialize;
    use serde_json::json;

    #[derive(Debug, Deserialize)]
    #[serde(deny_unknown_fields)]
    #[allow(dead_code)]
    struct Inner {
        name: String,
    }

    #[derive(Debug, Deserialize)]
    #[serde(deny_unknown_fields)]
    #[allow(dead_code)]
    struct Params {
        prefix: String,
        #[serde(default)]
        ips: Vec<String>,
        #[serde(default)]
        inner: Vec<Inner>,
    }

    fn field_of(params: Value) -> String {
        let e = parse_params::<Params>(&params).unwrap_err();
        assert_eq!(e.code, INVALID_PARAMS);
        let field = e.data.expect("data")["field"]
            .as_str()
            .expect("field")
            .to_string();
        assert!(
            e.message
                .starts_with(&format!("invalid params: `{field}`: ")),
            "{}",
            e.message
        );
        field
    }

    /// Writes `[0,1,…,n-1]` a few elements per piece.
    struct Count {
        n: usize,
        next: usize,
    }

    impl ReplyStream for Count {
        fn write_next(&mut self, out: &mut Vec<u8>, chunk: usize) -> Result<bool, RpcError> {
            let start = out.len();
            if self.next == 0 {
                out.push(b'[');
            }
            while self.next < self.n && out.len() - start < chunk {
                if self.next > 0 {
                    out.push(b',');
                }
                out.extend_from_slice(self.next.to_string().as_bytes());
                self.next += 1;
            }
            if self.next == self.n {
                out.push(b']');
                return Ok(true);
            }
            Ok(false)
        }
    }

    struct Fixed;

    impl Service for Fixed {
        fn call(&mut self, _: &str, params: &Value) -> Result<Value, RpcError> {
            Ok(params.clone())
        }
    }

    #[test]
    fn replies_default_to_the_value_and_streams_collect() {
        let reply = Fixed.call_reply("x", &json!([1])).unwrap();
        assert!(matches!(&reply, Reply::Value(v) if *v == json!([1])));
        let stream = Reply::Stream(Box::new(Count { n: 5000, next: 0 }));
        let expected: Vec<usize> = (0..5000).collect();
        assert_eq!(stream.into_value().unwrap(), json!(expected));
        let mut small = Count { n: 100, next: 0 };
        let mut out = Vec::new();
        let mut pieces = 0;
        while !small.write_next(&mut out, 8).unwrap() {
            pieces += 1;
        }
        assert!(pieces > 10, "{pieces}");
        assert_eq!(serde_json::from_slice::<Value>(&out).unwrap()[99], 99);
    }

    #[test]
    fn errors_name_the_field_path() {
        assert_eq!(field_of(json!({})), "prefix");
        assert_eq!(field_of(Value::Null), "prefix");
        assert_eq!(field_of(json!({"prefix": "x", "colour": 1})), "colour");
        assert_eq!(field_of(json!({"prefix": 5})), "prefix");
        assert_eq!(field_of(json!({"prefix": "x", "ips": ["a", 7]})), "ips[1]");
        assert_eq!(
            field_of(json!({"prefix": "x", "inner": [{"name": "a"}, {}]})),
            "inner[1].name"
        );
        assert_eq!(
            field_of(json!({"prefix": "x", "inner": [{"name": "a", "x": 1}]})),
            "inner[0].x"
        );
        // By-position params name the position.
        assert_eq!(field_of(json!([1, 2])), "[0]");
        assert_eq!(field_of(json!("text")), "params");
    }
}
