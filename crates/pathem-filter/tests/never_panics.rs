//! Whatever the text, compiling never panics; whatever the bytes, a compiled filter never
//! panics on them.

use pathem_filter::Filter;
use proptest::prelude::*;

/// Words and pieces of the language, so that much of the generated text gets past the parser.
const WORDS: &[&str] = &[
    "ip",
    "ip6",
    "tcp",
    "udp",
    "icmp",
    "icmp6",
    "sctp",
    "arp",
    "rarp",
    "ether",
    "vlan",
    "host",
    "net",
    "port",
    "portrange",
    "proto",
    "src",
    "dst",
    "and",
    "or",
    "not",
    "!",
    "(",
    ")",
    "[",
    "]",
    ":",
    "len",
    "less",
    "greater",
    "broadcast",
    "multicast",
    "mask",
    "=",
    "!=",
    "<",
    ">",
    "<=",
    ">=",
    "+",
    "-",
    "*",
    "/",
    "%",
    "&",
    "|",
    "^",
    "<<",
    ">>",
    "0",
    "1",
    "2",
    "4",
    "80",
    "0x1fff",
    "4294967295",
    "10.0.0.1",
    "10",
    "10.1",
    "2001:db8::1",
    "::",
    "02:00:00:00:00:01",
    "aabbccddeeff",
    "/",
    "8",
    "24",
    "1-100",
    "http",
    "\\tcp",
    "tcp-syn",
    "tcpflags",
    "icmp-echo",
    "icmptype",
    "gateway",
    "mpls",
];

fn text() -> impl Strategy<Value = String> {
    let word = prop_oneof![
        4 => proptest::sample::select(WORDS).prop_map(str::to_string),
        1 => "\\PC{0,6}",
    ];
    proptest::collection::vec(word, 0..14).prop_map(|w| w.join(" "))
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(3000))]

    #[test]
    fn compile_and_match_never_panic(text in text(), frame in proptest::collection::vec(any::<u8>(), 0..120), wire in any::<u32>()) {
        if let Ok(f) = Filter::compile(&text) {
            let _ = f.matches(&frame, wire);
            prop_assert_eq!(f.to_string(), text);
        }
    }

    #[test]
    fn arbitrary_text_never_panics(text in "\\PC{0,40}") {
        let _ = Filter::compile(&text);
    }
}

#[test]
fn deep_nesting_is_refused_not_overflowed() {
    for n in [10, 300, 5000] {
        let text = format!("{}tcp{}", "(".repeat(n), ")".repeat(n));
        let r = Filter::compile(&text);
        assert_eq!(r.is_ok(), n <= 10, "{n}");
        let text = format!("ip[{}0{}] = 1", "(".repeat(n), ")".repeat(n));
        let _ = Filter::compile(&text);
        let text = format!("{}tcp", "not ".repeat(n));
        let _ = Filter::compile(&text);
        let text = "host 10.0.0.1 and (".repeat(n);
        let _ = Filter::compile(&text);
    }
}

#[test]
fn long_chains_compile_or_are_refused() {
    for n in [1000, 20_000, 100_000] {
        let text = vec!["tcp"; n].join(" or ");
        let _ = Filter::compile(&text);
        let text = format!("ip[0] = 1{}", " + 1".repeat(n));
        let _ = Filter::compile(&text);
        let text = format!("host 10.0.0.1{}", " or 10.0.0.2".repeat(n));
        let _ = Filter::compile(&text);
    }
}

#[test]
fn long_words_are_quick() {
    let start = std::time::Instant::now();
    for unit in ["a", "1", "1:", "1.", "-", "\\x", ":1"] {
        let _ = Filter::compile(&unit.repeat(200_000));
    }
    assert!(start.elapsed().as_secs() < 20, "{:?}", start.elapsed());
}
