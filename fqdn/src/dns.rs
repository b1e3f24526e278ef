//! DNS messages for the proxy, through hickory-proto: a response read into its question
//! name and the addresses it gives that name (CNAME chains followed), a query read into
//! its question, and the REFUSED answer to a query `rules.dns` does not allow.

use std::collections::BTreeSet;
use std::net::IpAddr;

use hickory_proto::op::{Message, MessageType, ResponseCode};
use hickory_proto::rr::{RData, RecordType};

use crate::selector::normalize_name;

/// Why a message was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DnsError {
    #[error("not a DNS message: {0}")]
    Malformed(String),
    #[error("expected a {expected}, got a {got}")]
    WrongType {
        expected: &'static str,
        got: &'static str,
    },
    #[error("expected one question, got {0}")]
    Questions(usize),
    #[error("cannot encode the response: {0}")]
    Encode(String),
}

/// The question of a query.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DnsQuestion {
    pub id: u16,
    /// The name asked, in canonical form (lowercase, no trailing dot).
    pub name: String,
    pub qtype: RecordType,
}

/// What a response says about its question.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DnsAnswer {
    pub id: u16,
    /// The name asked, in canonical form.
    pub name: String,
    pub qtype: RecordType,
    pub rcode: ResponseCode,
    /// The A/AAAA addresses of the name, after its CNAME chain, each with the smallest
    /// TTL along the chain (the time the whole answer may be cached).
    pub records: Vec<(IpAddr, u32)>,
    /// The names of the CNAME chain after the question's, in order.
    pub cnames: Vec<String>,
}

fn decode(bytes: &[u8]) -> Result<Message, DnsError> {
    Message::from_vec(bytes).map_err(|e| DnsError::Malformed(e.to_string()))
}

fn kind(t: MessageType) -> &'static str {
    match t {
        MessageType::Query => "query",
        MessageType::Response => "response",
    }
}

fn question(msg: &Message) -> Result<(String, RecordType), DnsError> {
    match msg.queries() {
        [q] => Ok((normalize_name(&q.name().to_ascii()), q.query_type())),
        qs => Err(DnsError::Questions(qs.len())),
    }
}

/// Reads a query's question.
pub fn parse_query(bytes: &[u8]) -> Result<DnsQuestion, DnsError> {
    let msg = decode(bytes)?;
    if msg.message_type() != MessageType::Query {
        return Err(DnsError::WrongType {
            expected: "query",
            got: kind(msg.message_type()),
        });
    }
    let (name, qtype) = question(&msg)?;
    Ok(DnsQuestion {
        id: msg.id(),
        name,
        qtype,
    })
}

/// Reads a response: its question, its rcode, and the addresses the question's name
/// resolves to through the answer section's CNAME chain.
pub fn parse_response(bytes: &[u8]) -> Result<DnsAnswer, DnsError> {
    let msg = decode(bytes)?;
    if msg.message_type() != MessageType::Response {
        return Err(DnsError::WrongType {
            expected: "response",
            got: kind(msg.message_type()),
        });
    }
    let (name, qtype) = question(&msg)?;
    let answers = msg.answers();
    let owner = |r: &hickory_proto::rr::Record| normalize_name(&r.name().to_ascii());
    // Follow the chain; each step must be a new name, so a loop ends.
    let mut current = name.clone();
    let mut chain_ttl = u32::MAX;
    let mut cnames = Vec::new();
    let mut seen = BTreeSet::from([name.clone()]);
    while let Some((target, ttl)) = answers.iter().find_map(|r| match r.data() {
        RData::CNAME(c) if owner(r) == current => Some((normalize_name(&c.0.to_ascii()), r.ttl())),
        _ => None,
    }) {
        if !seen.insert(target.clone()) {
            break;
        }
        chain_ttl = chain_ttl.min(ttl);
        cnames.push(target.clone());
        current = target;
    }
    let mut records: Vec<(IpAddr, u32)> = Vec::new();
    for r in answers.iter().filter(|r| owner(r) == current) {
        let ip = match r.data() {
            RData::A(a) => IpAddr::V4(a.0),
            RData::AAAA(a) => IpAddr::V6(a.0),
            _ => continue,
        };
        if !records.iter().any(|(i, _)| *i == ip) {
            records.push((ip, r.ttl().min(chain_ttl)));
        }
    }
    Ok(DnsAnswer {
        id: msg.id(),
        name,
        qtype,
        rcode: msg.response_code(),
        records,
        cnames,
    })
}

/// The REFUSED response to a query: same id, opcode, question and RD bit, no records.
pub fn refused_response(query: &[u8]) -> Result<Vec<u8>, DnsError> {
    error_response(query, ResponseCode::Refused)
}

/// The SERVFAIL response to a query (upstream did not answer), built as
/// [`refused_response`].
pub fn servfail_response(query: &[u8]) -> Result<Vec<u8>, DnsError> {
    error_response(query, ResponseCode::ServFail)
}

/// The response with `rcode` to a query: same id, opcode, question and RD bit.
fn error_response(query: &[u8], rcode: ResponseCode) -> Result<Vec<u8>, DnsError> {
    let q = decode(query)?;
    if q.message_type() != MessageType::Query {
        return Err(DnsError::WrongType {
            expected: "query",
            got: kind(q.message_type()),
        });
    }
    let mut r = Message::error_msg(q.id(), q.op_code(), rcode);
    for question in q.queries() {
        r.add_query(question.clone());
    }
    r.set_recursion_desired(q.recursion_desired());
    r.to_vec().map_err(|e| DnsError::Encode(e.to_string()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use hickory_proto::op::Query;
    use hickory_proto::rr::rdata::{A, AAAA, CNAME};
    use hickory_proto::rr::{Name, Record};

    fn name(s: &str) -> Name {
        Name::from_ascii(s).unwrap()
    }

    fn response(q: &str, records: Vec<Record>) -> Vec<u8> {
        let mut m = Message::new();
        m.set_id(0x1234)
            .set_message_type(MessageType::Response)
            .set_recursion_desired(true);
        m.add_query(Query::query(name(q), RecordType::A));
        for r in records {
            m.add_answer(r);
        }
        m.to_vec().unwrap()
    }

    #[test]
    fn follows_the_cname_chain_with_the_smallest_ttl() {
        let bytes = response(
            "WWW.Example.com.",
            vec![
                Record::from_rdata(
                    name("www.example.com."),
                    300,
                    RData::CNAME(CNAME(name("edge.cdn.net."))),
                ),
                Record::from_rdata(
                    name("edge.cdn.net."),
                    60,
                    RData::CNAME(CNAME(name("e1.cdn.net."))),
                ),
                Record::from_rdata(
                    name("e1.cdn.net."),
                    120,
                    RData::A(A("192.0.2.10".parse().unwrap())),
                ),
                Record::from_rdata(
                    name("e1.cdn.net."),
                    20,
                    RData::A(A("192.0.2.11".parse().unwrap())),
                ),
                Record::from_rdata(
                    name("e1.cdn.net."),
                    120,
                    RData::AAAA(AAAA("2001:db8::10".parse().unwrap())),
                ),
                // Not on the chain: ignored.
                Record::from_rdata(
                    name("other.net."),
                    120,
                    RData::A(A("198.51.100.1".parse().unwrap())),
                ),
            ],
        );
        let a = parse_response(&bytes).unwrap();
        assert_eq!(a.id, 0x1234);
        assert_eq!(a.name, "www.example.com");
        assert_eq!(a.rcode, ResponseCode::NoError);
        assert_eq!(a.cnames, vec!["edge.cdn.net", "e1.cdn.net"]);
        assert_eq!(
            a.records,
            vec![
                ("192.0.2.10".parse().unwrap(), 60),
                ("192.0.2.11".parse().unwrap(), 20),
                ("2001:db8::10".parse().unwrap(), 60)
            ]
        );
    }

    #[test]
    fn a_cname_loop_ends() {
        let bytes = response(
            "a.test.",
            vec![
                Record::from_rdata(name("a.test."), 30, RData::CNAME(CNAME(name("b.test.")))),
                Record::from_rdata(name("b.test."), 30, RData::CNAME(CNAME(name("a.test.")))),
            ],
        );
        let a = parse_response(&bytes).unwrap();
        assert_eq!(a.cnames, vec!["b.test"]);
        assert!(a.records.is_empty());
    }

    /// A response as it comes off the wire: id 0xbeef, QR RD RA, NOERROR, question
    /// `example.test. A IN`, one answer with a compressed name, TTL 300, 192.0.2.1.
    const CAPTURED: &[u8] = &[
        0xbe, 0xef, 0x81, 0x80, 0x00, 0x01, 0x00, 0x01, 0x00, 0x00, 0x00, 0x00, // header
        0x07, b'e', b'x', b'a', b'm', b'p', b'l', b'e', 0x04, b't', b'e', b's', b't',
        0x00, // qname
        0x00, 0x01, 0x00, 0x01, // A IN
        0xc0, 0x0c, 0x00, 0x01, 0x00, 0x01, 0x00, 0x00, 0x01, 0x2c, 0x00, 0x04, 192, 0, 2,
        1, // answer
    ];

    #[test]
    fn parses_captured_bytes() {
        let a = parse_response(CAPTURED).unwrap();
        assert_eq!(a.id, 0xbeef);
        assert_eq!(a.name, "example.test");
        assert_eq!(a.qtype, RecordType::A);
        assert_eq!(a.records, vec![("192.0.2.1".parse().unwrap(), 300)]);
        assert!(matches!(
            parse_query(CAPTURED),
            Err(DnsError::WrongType {
                expected: "query",
                ..
            })
        ));
        assert!(matches!(
            parse_response(&CAPTURED[..20]),
            Err(DnsError::Malformed(_))
        ));
    }

    #[test]
    fn refuses_a_query() {
        let mut q = Message::new();
        q.set_id(7)
            .set_message_type(MessageType::Query)
            .set_recursion_desired(true);
        q.add_query(Query::query(name("evil.example."), RecordType::AAAA));
        let bytes = q.to_vec().unwrap();
        let question = parse_query(&bytes).unwrap();
        assert_eq!(
            (question.id, question.name.as_str(), question.qtype),
            (7, "evil.example", RecordType::AAAA)
        );
        let r = Message::from_vec(&refused_response(&bytes).unwrap()).unwrap();
        assert_eq!(r.id(), 7);
        assert_eq!(r.message_type(), MessageType::Response);
        assert_eq!(r.response_code(), ResponseCode::Refused);
        assert!(r.recursion_desired());
        assert_eq!(r.queries(), q.queries());
        assert!(r.answers().is_empty());
        let a = parse_response(&refused_response(&bytes).unwrap()).unwrap();
        assert_eq!(a.rcode, ResponseCode::Refused);
        assert!(
            refused_response(CAPTURED).is_err(),
            "a response is not answered"
        );
        let s = Message::from_vec(&servfail_response(&bytes).unwrap()).unwrap();
        assert_eq!((s.id(), s.response_code()), (7, ResponseCode::ServFail));
        assert_eq!(s.queries(), q.queries());
    }
}
