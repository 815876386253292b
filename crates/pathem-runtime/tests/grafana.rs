//! The Grafana dashboard in `examples/grafana/pathem.json` against the metrics pathem exports:
//! every metric a query names is a series of a scrape (of a link with classes, so the
//! `pathem_class_...` families are there too), and every label a query filters or groups by,
//! and every label a legend shows, is one those series carry (or `job` and `instance`, which
//! Prometheus adds to what it scrapes).

use pathem_engine::{Control, Counters, DirectionCounters};
use pathem_model::{DropReason, Nanos};
use pathem_runtime::metrics::{render, Exported};
use serde_json::Value;
use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

/// Labels Prometheus attaches to every series it scrapes.
const TARGET_LABELS: [&str; 2] = ["job", "instance"];

fn dashboard_text() -> String {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples/grafana/pathem.json");
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// The control of a transparent path.
fn transparent() -> Control {
    Control::detached(&pathem_model::PathConfig::default())
}

/// A scrape of a link of two directions, each with two classes (`default` and `dns`).
fn scrape() -> String {
    let direction = |direction: &'static str| {
        let (port, default, dns) =
            (Arc::new(Counters::default()), Arc::new(Counters::default()), Arc::new(Counters::default()));
        default.rx_packets.add(10);
        default.late.record(Nanos(300));
        dns.rx_packets.add(4);
        dns.dropped[DropReason::Loss as usize].add(1);
        dns.sojourn.record(Nanos(2_000_000));
        port.port_rx_dropped.add(2);
        let counters = DirectionCounters::new(port, vec![("default".into(), default), ("dns".into(), dns)]);
        Exported { direction, counters, controls: vec![transparent(), transparent()] }
    };
    render(&[direction("a_to_b"), direction("b_to_a")])
}

/// Each series name of a scrape, with the names of the labels its series carry.
fn series(text: &str) -> BTreeMap<String, BTreeSet<String>> {
    let mut out: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for line in text.lines().filter(|l| !l.starts_with('#') && !l.trim().is_empty()) {
        let end = line.find(['{', ' ']).unwrap_or(line.len());
        let labels = out.entry(line[..end].to_string()).or_default();
        if line[end..].starts_with('{') {
            let tokens = tokens(&line[end..]);
            // `{name="value",name="value"}`: a name is the identifier before each `=`.
            for pair in tokens.windows(2) {
                if let [Token::Ident(name), Token::Op(op)] = pair {
                    assert_eq!(op, "=", "{line}");
                    labels.insert(name.clone());
                }
            }
        }
    }
    out
}

#[derive(Debug, Clone, PartialEq)]
enum Token {
    /// A name: a metric, a label, a function or a keyword (numbers too; they never matter).
    Ident(String),
    /// A quoted string (its text is not looked into).
    Str,
    /// A matching operator (`=`, `!=`, `=~`, `!~`) or a comparison.
    Op(String),
    /// A Grafana variable (`$job`, `${job}`, `$__rate_interval`).
    Var,
    Punct(char),
}

/// PromQL (or a scrape's label set), cut into tokens.
fn tokens(text: &str) -> Vec<Token> {
    let chars: Vec<char> = text.chars().collect();
    let mut out = Vec::new();
    let mut i = 0;
    let word = |c: char| c.is_ascii_alphanumeric() || c == '_' || c == ':' || c == '.';
    while i < chars.len() {
        let c = chars[i];
        if c.is_whitespace() {
            i += 1;
        } else if c == '"' || c == '\'' || c == '`' {
            i += 1;
            while i < chars.len() && chars[i] != c {
                i += if chars[i] == '\\' { 2 } else { 1 };
            }
            i += 1;
            out.push(Token::Str);
        } else if c == '$' {
            i += 1;
            if chars.get(i) == Some(&'{') {
                while i < chars.len() && chars[i] != '}' {
                    i += 1;
                }
                i += 1;
            } else {
                while i < chars.len() && word(chars[i]) {
                    i += 1;
                }
            }
            out.push(Token::Var);
        } else if word(c) {
            let start = i;
            while i < chars.len() && word(chars[i]) {
                i += 1;
            }
            out.push(Token::Ident(chars[start..i].iter().collect()));
        } else if "=!<>~".contains(c) {
            let start = i;
            while i < chars.len() && "=!<>~".contains(chars[i]) {
                i += 1;
            }
            out.push(Token::Op(chars[start..i].iter().collect()));
        } else {
            out.push(Token::Punct(c));
            i += 1;
        }
    }
    out
}

/// What a query uses: the metrics it names, the labels its selectors match on, and the labels
/// of its `by`, `without`, `on`, `ignoring`, `group_left` and `group_right` clauses (and of
/// `label_values`, a Grafana variable's query).
#[derive(Debug, Default)]
struct Uses {
    metrics: BTreeSet<String>,
    matched: BTreeSet<String>,
    grouped: BTreeSet<String>,
}

fn uses(query: &str) -> Uses {
    let tokens = tokens(query);
    let mut uses = Uses::default();
    let mut braces = 0;
    for (i, token) in tokens.iter().enumerate() {
        match token {
            Token::Punct('{') => braces += 1,
            Token::Punct('}') => braces -= 1,
            Token::Ident(name) if braces > 0 => {
                assert!(
                    matches!(tokens.get(i + 1), Some(Token::Op(_))),
                    "a label without a match in {query}"
                );
                uses.matched.insert(name.clone());
            }
            Token::Ident(name) if is_metric(name) => {
                uses.metrics.insert(name.clone());
            }
            Token::Ident(name)
                if ["by", "without", "on", "ignoring", "group_left", "group_right"]
                    .contains(&name.as_str())
                    && tokens.get(i + 1) == Some(&Token::Punct('(')) =>
            {
                for t in tokens[i + 2..].iter().take_while(|t| **t != Token::Punct(')')) {
                    if let Token::Ident(label) = t {
                        uses.grouped.insert(label.clone());
                    }
                }
            }
            Token::Ident(name) if name == "label_values" => {
                // `label_values(metric{...}, label)` or `label_values(label)`: the last name
                // before the closing parenthesis.
                let args: Vec<_> = tokens[i + 1..].iter().take_while(|t| **t != Token::Punct(')')).collect();
                if let Some(Token::Ident(label)) = args.last() {
                    uses.grouped.insert(label.clone());
                }
            }
            _ => {}
        }
    }
    uses
}

/// `pathem_[a-z0-9_]+`.
fn is_metric(name: &str) -> bool {
    name.strip_prefix("pathem_").is_some_and(|rest| {
        !rest.is_empty() && rest.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_')
    })
}

/// The `{{label}}` names of a legend.
fn legend_labels(legend: &str) -> Vec<String> {
    legend.split("{{").skip(1).filter_map(|s| s.split_once("}}")).map(|(l, _)| l.trim().to_string()).collect()
}

/// Every panel, those of collapsed rows too.
fn panels(list: &Value) -> Vec<&Value> {
    let mut out = Vec::new();
    for panel in list.as_array().into_iter().flatten() {
        out.push(panel);
        out.extend(panels(&panel["panels"]));
    }
    out
}

/// Every string under the key `key`, anywhere in `v`.
fn strings_under<'a>(v: &'a Value, key: &str, out: &mut Vec<&'a str>) {
    match v {
        Value::Object(m) => {
            for (k, v) in m {
                match v {
                    Value::String(s) if k == key => out.push(s),
                    _ => strings_under(v, key, out),
                }
            }
        }
        Value::Array(a) => a.iter().for_each(|v| strings_under(v, key, out)),
        _ => {}
    }
}

/// What is wrong with `dashboard` (its JSON text) against the series of `scrape`; and the
/// metric names its queries use.
fn check(dashboard: &str, scrape: &str) -> (Vec<String>, BTreeSet<String>) {
    let exported = series(scrape);
    let mut problems = Vec::new();
    let mut used = BTreeSet::new();
    let dashboard: Value = match serde_json::from_str(dashboard) {
        Ok(v) => v,
        Err(e) => return (vec![format!("not JSON: {e}")], used),
    };
    let all = panels(&dashboard["panels"]);
    if all.is_empty() {
        problems.push("no panels".into());
    }
    let mut ids = BTreeSet::new();
    for panel in &all {
        let title = panel["title"].as_str().unwrap_or("");
        if !ids.insert(panel["id"].as_u64()) {
            problems.push(format!("panel {title:?}: its id {} is not unique", panel["id"]));
        }
        if panel["type"] == "row" {
            continue;
        }
        if panel["targets"].as_array().is_none_or(|t| t.is_empty()) {
            problems.push(format!("panel {title:?}: no targets"));
        }
        if panel["datasource"]["uid"] != "${datasource}" {
            problems.push(format!("panel {title:?}: not on the ${{datasource}} variable"));
        }
        if ["timeseries", "stat"].contains(&panel["type"].as_str().unwrap_or(""))
            && !panel["fieldConfig"]["defaults"]["unit"].is_string()
        {
            problems.push(format!("panel {title:?}: no unit"));
        }
        for target in panel["targets"].as_array().into_iter().flatten() {
            if target["expr"].as_str().is_none_or(|e| e.trim().is_empty()) {
                problems.push(format!("panel {title:?}: a target without an expr"));
            }
        }
    }
    // The queries: every `expr` (panels' targets, wherever they are) and the variables'.
    let mut queries = Vec::new();
    strings_under(&dashboard, "expr", &mut queries);
    for var in dashboard["templating"]["list"].as_array().into_iter().flatten() {
        if var["type"] == "query" {
            match &var["query"] {
                Value::String(q) => queries.push(q),
                q => queries.extend(q["query"].as_str()),
            }
        }
    }
    if !dashboard["templating"]["list"]
        .as_array()
        .is_some_and(|l| l.iter().any(|v| v["name"] == "datasource" && v["query"] == "prometheus"))
    {
        problems.push("no datasource variable of type prometheus".into());
    }
    let mut legends: Vec<(&str, &str)> = Vec::new();
    for panel in &all {
        for target in panel["targets"].as_array().into_iter().flatten() {
            if let (Some(e), Some(l)) = (target["expr"].as_str(), target["legendFormat"].as_str()) {
                legends.push((e, l));
            }
        }
    }
    for query in &queries {
        let uses = uses(query);
        if uses.metrics.is_empty() {
            problems.push(format!("{query}: names no pathem metric"));
        }
        let mut carried: BTreeSet<&str> = TARGET_LABELS.into();
        for metric in &uses.metrics {
            used.insert(metric.clone());
            match exported.get(metric) {
                Some(labels) => carried.extend(labels.iter().map(String::as_str)),
                None => problems.push(format!("{query}: {metric} is not a series pathem exports")),
            }
        }
        for label in uses.matched.iter().chain(&uses.grouped) {
            if !carried.contains(label.as_str()) {
                problems.push(format!("{query}: no series of {:?} carries the label {label}", uses.metrics));
            }
        }
        for (_, legend) in legends.iter().filter(|(e, _)| e == query) {
            for label in legend_labels(legend) {
                let kept = uses.grouped.is_empty() || uses.grouped.contains(&label);
                if !carried.contains(label.as_str()) || !kept {
                    problems.push(format!(
                        "{query}: the legend {legend:?} shows {label}, which it does not keep"
                    ));
                }
            }
        }
    }
    (problems, used)
}

#[test]
fn the_grafana_dashboard_uses_only_metrics_and_labels_pathem_exports() {
    let scrape = scrape();
    assert!(scrape.contains("pathem_class_path_info{"), "{scrape}");
    let (problems, used) = check(&dashboard_text(), &scrape);
    assert!(problems.is_empty(), "{}\n\nscrape:\n{scrape}", problems.join("\n"));
    // Every family the dashboard reads, with or without classes.
    for family in [
        "pathem_rx_frames_total",
        "pathem_tx_bytes_total",
        "pathem_dropped_frames_total",
        "pathem_port_tx_errors_total",
        "pathem_lateness_seconds_bucket",
        "pathem_sojourn_seconds_bucket",
        "pathem_path_info",
        "pathem_class_rx_frames_total",
        "pathem_class_dropped_frames_total",
        "pathem_class_path_info",
    ] {
        assert!(used.contains(family), "the dashboard does not use {family}");
    }
    eprintln!("the dashboard uses {} metric names, all exported: {used:?}", used.len());
}

#[test]
fn the_check_catches_a_renamed_metric_or_label() {
    let (scrape, dashboard) = (scrape(), dashboard_text());
    for (from, to, want) in [
        ("pathem_rx_frames_total", "pathem_rx_packets_total", "pathem_rx_packets_total is not a series"),
        ("pathem_lateness_seconds_bucket", "pathem_late_seconds_bucket", "pathem_late_seconds_bucket is not"),
        ("pathem_class_path_info", "pathem_class_path", "pathem_class_path is not a series"),
        ("by (direction, reason)", "by (direction, cause)", "carries the label cause"),
        ("direction=~", "dir=~", "carries the label dir"),
        ("{{reason}}", "{{why}}", "shows why"),
    ] {
        assert!(dashboard.contains(from), "{from}");
        let (problems, _) = check(&dashboard.replace(from, to), &scrape);
        assert!(problems.iter().any(|p| p.contains(want)), "{from} -> {to}: {problems:?}");
    }
    // And a scrape whose metric was renamed.
    let (problems, _) =
        check(&dashboard, &scrape.replace("pathem_in_flight_frames", "pathem_frames_in_flight"));
    assert!(problems.iter().any(|p| p.contains("pathem_in_flight_frames is not")), "{problems:?}");
    assert!(!check("{", &scrape).0.is_empty() && !check("{\"panels\": []}", &scrape).0.is_empty());
}
