//! Messages in protobuf's text format, as `print(message)` shows them: what
//! protobuf's upb backend prints, keys of maps in ascending byte order.

use crate::example::Kind;
use crate::message::{lock, Example, Feature, FeatureMap, List};
use crate::message_sequence::{FeatureList, FeatureLists, SequenceExample};

/// Lines of text, indented as they nest.
#[derive(Default)]
pub struct Text {
    lines: Vec<String>,
    depth: usize,
}

impl Text {
    fn line(&mut self, text: impl AsRef<str>) {
        self.lines.push(format!(
            "{:width$}{}",
            "",
            text.as_ref(),
            width = 2 * self.depth
        ));
    }

    fn open(&mut self, name: &str) {
        self.line(format!("{name} {{"));
        self.depth += 1;
    }

    fn close(&mut self) {
        self.depth -= 1;
        self.line("}");
    }

    /// The message's text: its lines, each ending in a newline ("" for none).
    pub fn finish(self) -> String {
        let mut out = self.lines.join("\n");
        if !out.is_empty() {
            out.push('\n');
        }
        out
    }

    pub fn list(&mut self, list: &List) {
        match list {
            List::Bytes(v) => v
                .iter()
                .for_each(|b| self.line(format!("value: {}", quoted(b)))),
            List::Float(v) => v
                .iter()
                .for_each(|&x| self.line(format!("value: {}", float32(x)))),
            List::Double(v) => v
                .iter()
                .for_each(|&x| self.line(format!("value: {}", float64(x)))),
            List::Int32(v) => v.iter().for_each(|x| self.line(format!("value: {x}"))),
            List::Int64(v) => v.iter().for_each(|x| self.line(format!("value: {x}"))),
        }
    }

    pub fn feature(&mut self, feature: &mut Feature) {
        if let Some(list) = feature.list() {
            self.open(list_name(list.kind()));
            self.list(list);
            self.close();
        }
    }

    pub fn feature_map(&mut self, map: &FeatureMap) {
        map.visit_sorted(
            |a, b| a.cmp(b),
            |key, feature| {
                self.open("feature");
                self.line(format!("key: {}", quoted(key.as_bytes())));
                self.open("value");
                self.feature(feature);
                self.close();
                self.close();
            },
        );
    }

    pub fn feature_list(&mut self, list: &FeatureList) {
        for step in &list.steps {
            self.open("feature");
            self.feature(&mut lock(step));
            self.close();
        }
    }

    pub fn feature_lists(&mut self, lists: &FeatureLists) {
        let mut entries: Vec<_> = lists.entries.iter().collect();
        entries.sort_by(|a, b| a.0.as_bytes().cmp(b.0.as_bytes()));
        for (key, node) in entries {
            self.open("feature_list");
            self.line(format!("key: {}", quoted(key.as_bytes())));
            self.open("value");
            self.feature_list(&lock(node));
            self.close();
            self.close();
        }
    }

    pub fn example(&mut self, example: &mut Example) {
        if example.has_features() {
            let map = example.features();
            self.open("features");
            self.feature_map(&lock(&map));
            self.close();
        }
    }

    pub fn sequence_example(&mut self, sequence: &SequenceExample) {
        let context = lock(&sequence.context);
        if context.present() {
            self.open("context");
            self.feature_map(&context);
            self.close();
        }
        drop(context);
        let lists = lock(&sequence.feature_lists);
        if lists.present() {
            self.open("feature_lists");
            self.feature_lists(&lists);
            self.close();
        }
    }
}

pub fn list_name(kind: Kind) -> &'static str {
    kind.list_name()
}

/// A byte string quoted as protobuf's text format writes it: C escapes, octal
/// for other bytes outside printable ASCII.
pub fn quoted(bytes: &[u8]) -> String {
    let mut out = String::with_capacity(bytes.len() + 2);
    out.push('"');
    for &b in bytes {
        match b {
            b'\n' => out.push_str("\\n"),
            b'\r' => out.push_str("\\r"),
            b'\t' => out.push_str("\\t"),
            b'"' => out.push_str("\\\""),
            b'\'' => out.push_str("\\'"),
            b'\\' => out.push_str("\\\\"),
            0x20..=0x7e => out.push(b as char),
            _ => out.push_str(&format!("\\{b:03o}")),
        }
    }
    out.push('"');
    out
}

fn special(x: f64) -> Option<&'static str> {
    if x.is_nan() {
        Some("nan")
    } else if x.is_infinite() {
        Some(if x > 0.0 { "inf" } else { "-inf" })
    } else {
        None
    }
}

/// A float32 as protobuf prints it: the shortest of 6 or 9 significant digits that reads back the same.
pub fn float32(x: f32) -> String {
    if let Some(s) = special(f64::from(x)) {
        return s.to_owned();
    }
    let short = format_g(f64::from(x), 6);
    if short.parse::<f64>().map(|v| v as f32) == Ok(x) {
        short
    } else {
        format_g(f64::from(x), 9)
    }
}

/// A float64 as protobuf prints it: 15 significant digits, or 17 where those do not read back the same.
pub fn float64(x: f64) -> String {
    if let Some(s) = special(x) {
        return s.to_owned();
    }
    let short = format_g(x, 15);
    if short.parse::<f64>() == Ok(x) {
        short
    } else {
        format_g(x, 17)
    }
}

/// C's `%.{precision}g`: `precision` significant digits, in fixed notation for
/// exponents from -4 to below `precision`, else as `d.ddde+XX`; trailing zeros dropped.
pub fn format_g(x: f64, precision: usize) -> String {
    let precision = precision.max(1);
    let scientific = format!("{:.*e}", precision - 1, x);
    let (mantissa, exponent) = scientific.split_once('e').expect("{:e} has an exponent");
    let exponent: i32 = exponent.parse().expect("a whole exponent");
    if exponent < -4 || exponent >= precision as i32 {
        let mantissa = trim_zeros(mantissa);
        let sign = if exponent < 0 { '-' } else { '+' };
        return format!("{mantissa}e{sign}{:02}", exponent.abs());
    }
    let decimals = (precision as i32 - 1 - exponent).max(0) as usize;
    trim_zeros(&format!("{x:.decimals$}")).to_owned()
}

fn trim_zeros(number: &str) -> &str {
    if number.contains('.') {
        number.trim_end_matches('0').trim_end_matches('.')
    } else {
        number
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn format_g_is_cs() {
        for (x, p, want) in [
            (16777216.0, 6, "1.67772e+07"),
            (16777216.0, 9, "16777216"),
            (0.1, 6, "0.1"),
            (0.0001, 6, "0.0001"),
            (0.00001, 6, "1e-05"),
            (123456.0, 6, "123456"),
            (1234567.0, 6, "1.23457e+06"),
            (-0.0, 6, "-0"),
            (0.0, 6, "0"),
            (1.5, 6, "1.5"),
            (std::f64::consts::E, 6, "2.71828"),
            (1e100, 15, "1e+100"),
            (3.4028234663852886e38, 9, "3.40282347e+38"),
            (-2.5e-7, 6, "-2.5e-07"),
            (100.0, 1, "1e+02"),
        ] {
            assert_eq!(format_g(x, p), want, "{x} %.{p}g");
        }
    }

    #[test]
    fn floats_print_the_shortest_that_reads_back() {
        assert_eq!(float32(0.1), "0.1");
        assert_eq!(float32(16777216.0), "16777216");
        assert_eq!(float32(2.7182817), "2.71828175");
        assert_eq!(float32(f32::NAN), "nan");
        assert_eq!(float32(f32::NEG_INFINITY), "-inf");
        assert_eq!(float64(0.1), "0.1");
        assert_eq!(float64(1.0 / 3.0), "0.33333333333333331");
    }

    #[test]
    fn bytes_are_quoted_as_protobuf_does() {
        assert_eq!(
            quoted(b"\x00\xff\n\"'\\ \x7f"),
            r#""\000\377\n\"\'\\ \177""#
        );
    }
}
