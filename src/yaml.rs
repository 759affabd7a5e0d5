//! YAML in and out.
//!
//! In: serde_yaml_ng refuses alias bombs ("repetition limit exceeded") and deep nesting ("recursion limit
//! exceeded"), but only after libyaml has scanned the whole document, and libyaml's scanner is quadratic in
//! nesting depth (100,000 nested `[` took 80 s in a debug build). [`check_depth`] refuses documents nested
//! deeper than [`MAX_DEPTH`] before the parser sees them. It follows libyaml's own scanner (unsafe-libyaml
//! 0.2.11, `scanner.rs`) token by token: where a quoted scalar, a comment, a plain scalar and a block scalar
//! begin and end, and the block indentation stack, so text that libyaml reads as structure is never skipped
//! as a string or a comment (a `#` or `'` inside a plain scalar once hid 100,000 levels from a line-based
//! check). Trade-off: a document libyaml rejects is followed only up to its first error, since libyaml reads
//! no further either. Profiles and inventories are a few levels deep.
//!
//! Out: [`to_string`] writes YAML that YAML 1.1 readers (PyYAML, go-yaml v2 under Kubernetes tooling) read
//! back unchanged: serde_yaml_ng quotes only what a YAML 1.2 reader would retype, so `on`, `yes`, `y`, `0777`,
//! `1:20` or `2001-12-14` went out plain and came back as `True`, 511, 80 or a date.

use serde::Serialize;
use serde::de::DeserializeOwned;

/// Deepest nesting accepted: flow collections (`[`, `{`) and block collections (each deeper indentation
/// libyaml opens, compact `- - x` included) count together.
pub const MAX_DEPTH: usize = 64;
/// libyaml forgets a possible simple key (`key: value`) after this many characters (`scanner.rs`,
/// `yaml_parser_stale_simple_keys`); the scan follows it so the block indentation it rolls stays libyaml's.
const SIMPLE_KEY_MAX_CHARS: u64 = 1024;

/// Refuses text nested deeper than [`MAX_DEPTH`], in one pass that tokenizes as libyaml does.
pub fn check_depth(text: &str) -> Result<(), String> {
    Scanner::new(text.as_bytes()).run()
}

/// A possible simple key: where a token that may turn out to be a mapping key began.
#[derive(Debug, Clone, Copy, Default)]
struct SimpleKey {
    possible: bool,
    line: u64,
    column: i64,
    index: u64,
}

/// The part of libyaml's scanner state that decides nesting and token extents. Positions count characters,
/// as libyaml's marks do.
struct Scanner<'a> {
    b: &'a [u8],
    pos: usize,
    line: u64,
    column: i64,
    index: u64,
    flow_level: usize,
    indent: i64,
    indents: Vec<i64>,
    simple_key_allowed: bool,
    /// One per flow level, plus the block level's.
    simple_keys: Vec<SimpleKey>,
}

impl<'a> Scanner<'a> {
    fn new(b: &'a [u8]) -> Self {
        Scanner {
            b,
            pos: 0,
            line: 0,
            column: 0,
            index: 0,
            flow_level: 0,
            indent: -1,
            indents: Vec::new(),
            simple_key_allowed: true,
            simple_keys: vec![SimpleKey::default()],
        }
    }

    fn at(&self, k: usize) -> Option<u8> {
        self.b.get(self.pos + k).copied()
    }

    fn is(&self, k: usize, c: u8) -> bool {
        self.at(k) == Some(c)
    }

    fn end(&self) -> bool {
        self.pos >= self.b.len()
    }

    /// Bytes of the line break at `pos + k` (CR LF, CR, LF, NEL, LS, PS), 0 if none.
    fn break_len(&self, k: usize) -> usize {
        let b = &self.b[(self.pos + k).min(self.b.len())..];
        match b {
            [b'\r', b'\n', ..] => 2,
            [b'\r' | b'\n', ..] => 1,
            [0xC2, 0x85, ..] => 2,
            [0xE2, 0x80, 0xA8 | 0xA9, ..] => 3,
            _ => 0,
        }
    }

    fn is_break(&self, k: usize) -> bool {
        self.break_len(k) > 0
    }

    fn is_blank(&self, k: usize) -> bool {
        matches!(self.at(k), Some(b' ' | b'\t'))
    }

    /// Blank, break or end of input.
    fn is_blankz(&self, k: usize) -> bool {
        self.pos + k >= self.b.len() || self.is_blank(k) || self.is_break(k)
    }

    fn is_breakz(&self, k: usize) -> bool {
        self.pos + k >= self.b.len() || self.is_break(k)
    }

    /// Skips one character (not a break).
    fn skip(&mut self) {
        let width = match self.b[self.pos] {
            x if x < 0x80 => 1,
            x if x >> 5 == 0b110 => 2,
            x if x >> 4 == 0b1110 => 3,
            _ => 4,
        };
        self.pos = (self.pos + width).min(self.b.len());
        self.column += 1;
        self.index += 1;
    }

    /// Skips a line break, or one character if there is none.
    fn skip_line(&mut self) {
        match self.break_len(0) {
            0 => self.skip(),
            n => {
                self.pos += n;
                self.line += 1;
                self.column = 0;
                self.index += if n == 2 && self.b[self.pos - 2] == b'\r' {
                    2
                } else {
                    1
                };
            }
        }
    }

    /// Skips a character or a line break.
    fn skip_any(&mut self) {
        if self.is_break(0) {
            self.skip_line();
        } else {
            self.skip();
        }
    }

    fn too_deep(&self) -> Result<(), String> {
        if self.flow_level + self.indents.len() > MAX_DEPTH {
            return Err(format!(
                "line {}: nested deeper than {MAX_DEPTH} levels",
                self.line + 1
            ));
        }
        Ok(())
    }

    fn doc_indicator(&self) -> bool {
        self.column == 0
            && (self.b[self.pos..].starts_with(b"---") || self.b[self.pos..].starts_with(b"..."))
            && self.is_blankz(3)
    }

    fn top_key(&mut self) -> &mut SimpleKey {
        let n = self.simple_keys.len() - 1;
        &mut self.simple_keys[n]
    }

    fn save_simple_key(&mut self) {
        if self.simple_key_allowed {
            let (line, column, index) = (self.line, self.column, self.index);
            *self.top_key() = SimpleKey {
                possible: true,
                line,
                column,
                index,
            };
        }
    }

    fn remove_simple_key(&mut self) {
        self.top_key().possible = false;
    }

    fn stale_simple_keys(&mut self) {
        let (line, index) = (self.line, self.index);
        for k in &mut self.simple_keys {
            if k.possible && (k.line < line || k.index + SIMPLE_KEY_MAX_CHARS < index) {
                k.possible = false;
            }
        }
    }

    fn roll_indent(&mut self, column: i64) -> Result<(), String> {
        if self.flow_level == 0 && self.indent < column {
            self.indents.push(self.indent);
            self.indent = column;
            self.too_deep()?;
        }
        Ok(())
    }

    fn unroll_indent(&mut self, column: i64) {
        if self.flow_level == 0 {
            while self.indent > column {
                self.indent = self.indents.pop().unwrap_or(-1);
            }
        }
    }

    fn run(mut self) -> Result<(), String> {
        loop {
            self.scan_to_next_token();
            self.stale_simple_keys();
            self.unroll_indent(self.column);
            let Some(c) = self.at(0) else {
                return Ok(());
            };
            let flow = self.flow_level > 0;
            match c {
                b'%' if self.column == 0 => {
                    // A directive: its line holds nothing nested.
                    self.unroll_indent(-1);
                    self.remove_simple_key();
                    self.simple_key_allowed = false;
                    while !self.is_breakz(0) {
                        self.skip();
                    }
                }
                b'-' | b'.' if self.doc_indicator() => {
                    self.unroll_indent(-1);
                    self.remove_simple_key();
                    self.simple_key_allowed = false;
                    for _ in 0..3 {
                        self.skip();
                    }
                }
                b'[' | b'{' => {
                    self.save_simple_key();
                    self.flow_level += 1;
                    self.simple_keys.push(SimpleKey::default());
                    self.too_deep()?;
                    self.simple_key_allowed = true;
                    self.skip();
                }
                b']' | b'}' => {
                    self.remove_simple_key();
                    if self.flow_level > 0 {
                        self.flow_level -= 1;
                        self.simple_keys.pop();
                    }
                    self.simple_key_allowed = false;
                    self.skip();
                }
                b',' => {
                    self.remove_simple_key();
                    self.simple_key_allowed = true;
                    self.skip();
                }
                b'-' if self.is_blankz(1) => {
                    if !flow {
                        self.roll_indent(self.column)?;
                    }
                    self.remove_simple_key();
                    self.simple_key_allowed = true;
                    self.skip();
                }
                b'?' if flow || self.is_blankz(1) => {
                    if !flow {
                        self.roll_indent(self.column)?;
                    }
                    self.remove_simple_key();
                    self.simple_key_allowed = !flow;
                    self.skip();
                }
                b':' if flow || self.is_blankz(1) => {
                    let key = *self.top_key();
                    if key.possible {
                        self.roll_indent(key.column)?;
                        self.top_key().possible = false;
                        self.simple_key_allowed = false;
                    } else {
                        if !flow {
                            self.roll_indent(self.column)?;
                        }
                        self.simple_key_allowed = !flow;
                    }
                    self.skip();
                }
                b'*' | b'&' => {
                    self.save_simple_key();
                    self.simple_key_allowed = false;
                    self.skip();
                    while self
                        .at(0)
                        .is_some_and(|c| c.is_ascii_alphanumeric() || c == b'_' || c == b'-')
                    {
                        self.skip();
                    }
                }
                b'!' => {
                    self.save_simple_key();
                    self.simple_key_allowed = false;
                    self.scan_tag();
                }
                b'|' | b'>' if !flow => {
                    self.remove_simple_key();
                    self.simple_key_allowed = true;
                    self.scan_block_scalar();
                }
                b'\'' | b'"' => {
                    self.save_simple_key();
                    self.simple_key_allowed = false;
                    self.scan_quoted(c);
                }
                _ if self.plain_start(c) => {
                    self.save_simple_key();
                    self.simple_key_allowed = false;
                    self.scan_plain();
                }
                // libyaml stops here ("found character that cannot start any token"); the scan goes on,
                // which can only count more.
                _ => self.skip(),
            }
        }
    }

    /// `yaml_parser_fetch_next_token`'s test for the start of a plain scalar.
    fn plain_start(&self, c: u8) -> bool {
        let indicator = self.is_blankz(0) || b"-?:,[]{}#&*!|>'\"%@`".contains(&c);
        !indicator
            || (c == b'-' && !self.is_blank(1))
            || (self.flow_level == 0 && (c == b'?' || c == b':') && !self.is_blankz(1))
    }

    /// Blanks, comments and line breaks between tokens (`yaml_parser_scan_to_next_token`).
    fn scan_to_next_token(&mut self) {
        loop {
            if self.column == 0 && self.b[self.pos..].starts_with(b"\xEF\xBB\xBF") {
                self.skip();
            }
            while self.is(0, b' ')
                || ((self.flow_level > 0 || !self.simple_key_allowed) && self.is(0, b'\t'))
            {
                self.skip();
            }
            if self.is(0, b'#') {
                while !self.is_breakz(0) {
                    self.skip();
                }
            }
            if !self.is_break(0) {
                return;
            }
            self.skip_line();
            if self.flow_level == 0 {
                self.simple_key_allowed = true;
            }
        }
    }

    /// A tag runs to a blank, or to a `,` in a flow collection (anything else there is a libyaml error).
    fn scan_tag(&mut self) {
        self.skip();
        if self.is(0, b'<') {
            while !self.is_blankz(0) && !self.is(0, b'>') {
                self.skip();
            }
        }
        while !self.is_blankz(0) && !(self.flow_level > 0 && self.is(0, b',')) {
            self.skip();
        }
    }

    /// A single- or double-quoted scalar, over any number of lines (`yaml_parser_scan_flow_scalar`).
    fn scan_quoted(&mut self, quote: u8) {
        self.skip();
        loop {
            if self.end() || self.doc_indicator() {
                return; // libyaml: unexpected end of stream / document indicator.
            }
            match self.at(0) {
                Some(b'\'') if quote == b'\'' && self.is(1, b'\'') => {
                    self.skip();
                    self.skip();
                }
                Some(c) if c == quote => {
                    self.skip();
                    return;
                }
                Some(b'\\') if quote == b'"' => {
                    self.skip();
                    if !self.end() {
                        self.skip_any();
                    }
                }
                _ => self.skip_any(),
            }
        }
    }

    /// A plain scalar (`yaml_parser_scan_plain_scalar`): in a flow collection it ends at `,[]{}`; in block
    /// context a following line continues it when indented past the enclosing block's indentation.
    fn scan_plain(&mut self) {
        let indent = self.indent + 1;
        let flow = self.flow_level > 0;
        let mut leading_blanks = false;
        loop {
            if self.doc_indicator() || self.is(0, b'#') {
                break;
            }
            while !self.is_blankz(0) {
                let c = self.b[self.pos];
                if (c == b':' && self.is_blankz(1)) || (flow && b",[]{}".contains(&c)) {
                    break;
                }
                // (libyaml stops with an error at `:` followed by `,?[]{}` in a flow collection; the scan
                // goes on, which can only count more.)
                self.skip();
                leading_blanks = false;
            }
            if !(self.is_blank(0) || self.is_break(0)) {
                break;
            }
            while self.is_blank(0) || self.is_break(0) {
                if self.is_blank(0) {
                    self.skip();
                } else {
                    self.skip_line();
                    leading_blanks = true;
                }
            }
            if !flow && self.column < indent {
                break;
            }
        }
        if leading_blanks {
            self.simple_key_allowed = true;
        }
    }

    /// A literal or folded block scalar (`yaml_parser_scan_block_scalar`): its content is every following line
    /// indented at least as far as the first non-empty one (or the explicit indentation indicator says).
    fn scan_block_scalar(&mut self) {
        self.skip();
        let mut increment: i64 = 0;
        for _ in 0..2 {
            match self.at(0) {
                Some(b'+' | b'-') => self.skip(),
                Some(d @ b'1'..=b'9') if increment == 0 => {
                    increment = i64::from(d - b'0');
                    self.skip();
                }
                _ => {}
            }
        }
        while self.is_blank(0) {
            self.skip();
        }
        if self.is(0, b'#') {
            while !self.is_breakz(0) {
                self.skip();
            }
        }
        if !self.is_breakz(0) {
            return; // libyaml: "did not find expected comment or line break".
        }
        if self.is_break(0) {
            self.skip_line();
        }
        let mut indent = if increment > 0 {
            if self.indent >= 0 {
                self.indent + increment
            } else {
                increment
            }
        } else {
            0
        };
        self.block_scalar_breaks(&mut indent);
        while self.column == indent && !self.end() {
            while !self.is_breakz(0) {
                self.skip();
            }
            if self.end() {
                break;
            }
            self.skip_line();
            self.block_scalar_breaks(&mut indent);
        }
    }

    fn block_scalar_breaks(&mut self, indent: &mut i64) {
        let mut max_indent = 0;
        loop {
            while (*indent == 0 || self.column < *indent) && self.is(0, b' ') {
                self.skip();
            }
            max_indent = max_indent.max(self.column);
            if !self.is_break(0) {
                break;
            }
            self.skip_line();
        }
        if *indent == 0 {
            *indent = max_indent.max(self.indent + 1).max(1);
        }
    }
}

/// YAML that YAML 1.1 readers read back unchanged: every string a YAML 1.1 reader would retype
/// ([`yaml11_retypes`]) is single-quoted; everything else is serde_yaml_ng's output as it was.
///
/// serde_yaml_ng has no per-scalar style, so such strings are swapped for unique plain placeholders before
/// emitting and the placeholders for the quoted strings after.
pub fn to_string<T: Serialize + ?Sized>(value: &T) -> Result<String, serde_yaml_ng::Error> {
    use serde_yaml_ng::Value;
    let mut v = serde_yaml_ng::to_value(value)?;
    // A marker no string of the document contains: a fixed prefix and a counter until one is free.
    let mut nonce = String::new();
    for n in 0u32.. {
        nonce = format!("yamlquote{n}x");
        if !contains_str(&v, &nonce) {
            break;
        }
    }
    let mut quoted: Vec<String> = Vec::new();
    fn mark(v: &mut Value, nonce: &str, quoted: &mut Vec<String>) {
        let placeholder = |s: &str, quoted: &mut Vec<String>| {
            quoted.push(s.to_owned());
            Value::String(format!("{nonce}{:08}", quoted.len() - 1))
        };
        match v {
            Value::String(s) if yaml11_retypes(s) => *v = placeholder(s, quoted),
            Value::Sequence(items) => items.iter_mut().for_each(|i| mark(i, nonce, quoted)),
            Value::Mapping(m) => {
                let old = std::mem::take(m);
                for (mut k, mut val) in old {
                    if let Value::String(s) = &k
                        && yaml11_retypes(s)
                    {
                        k = placeholder(s, quoted);
                    } else {
                        mark(&mut k, nonce, quoted);
                    }
                    mark(&mut val, nonce, quoted);
                    m.insert(k, val);
                }
            }
            Value::Tagged(t) => mark(&mut t.value, nonce, quoted),
            _ => {}
        }
    }
    mark(&mut v, &nonce, &mut quoted);
    let text = serde_yaml_ng::to_string(&v)?;
    if quoted.is_empty() {
        return Ok(text);
    }
    let mut out = String::with_capacity(text.len() + 2 * quoted.len());
    let mut rest = text.as_str();
    while let Some(i) = rest.find(nonce.as_str()) {
        out.push_str(&rest[..i]);
        let digits = &rest[i + nonce.len()..];
        let n: usize = digits
            .get(..8)
            .and_then(|d| d.parse().ok())
            .unwrap_or(usize::MAX);
        match quoted.get(n) {
            Some(s) => {
                out.push('\'');
                out.push_str(&s.replace('\'', "''"));
                out.push('\'');
                rest = &digits[8..];
            }
            // Not one of ours (cannot happen: the nonce occurs in no string of the document).
            None => {
                out.push_str(&nonce);
                rest = digits;
            }
        }
    }
    out.push_str(rest);
    Ok(out)
}

fn contains_str(v: &serde_yaml_ng::Value, needle: &str) -> bool {
    use serde_yaml_ng::Value;
    match v {
        Value::String(s) => s.contains(needle),
        Value::Sequence(items) => items.iter().any(|i| contains_str(i, needle)),
        Value::Mapping(m) => m
            .iter()
            .any(|(k, v)| contains_str(k, needle) || contains_str(v, needle)),
        Value::Tagged(t) => t.tag.to_string().contains(needle) || contains_str(&t.value, needle),
        _ => false,
    }
}

/// Whether a YAML 1.1 reader would read this string, written plain, as something other than that string:
/// the YAML 1.1 types (<https://yaml.org/type/>: bool, null, int, float, timestamp, merge `<<`, value `=`),
/// which PyYAML's `resolver.py` implements (less `y`/`n`, kept here for other 1.1 readers), and go-yaml v2's
/// number parsing (Kubernetes tooling: Go's `ParseInt` with base prefixes and `ParseFloat`, underscores
/// dropped, for scalars starting with a digit, sign or dot). Conservative: quoting a string that did not need
/// it changes nothing a reader sees.
pub fn yaml11_retypes(s: &str) -> bool {
    const WORDS: &[&str] = &[
        "y", "Y", "yes", "Yes", "YES", "n", "N", "no", "No", "NO", "true", "True", "TRUE", "false",
        "False", "FALSE", "on", "On", "ON", "off", "Off", "OFF", "~", "null", "Null", "NULL", "",
        "=", "<<", "!", "&", "*",
    ];
    WORDS.contains(&s) || is_yaml11_number(s) || is_go_number(s) || is_yaml11_timestamp(s)
}

fn all(s: &str, f: impl Fn(u8) -> bool) -> bool {
    s.bytes().all(f)
}

fn digit_(c: u8) -> bool {
    c.is_ascii_digit() || c == b'_'
}

/// `(:[0-5]?[0-9])+`, the sexagesimal tail of YAML 1.1 ints and floats.
fn sexagesimal_tail(s: &str) -> bool {
    !s.is_empty()
        && s.split(':')
            .skip(1)
            .all(|p| matches!(p.as_bytes(), [a] | [b'0'..=b'5', a] if a.is_ascii_digit()))
        && s.starts_with(':')
}

/// YAML 1.1 int and float (<https://yaml.org/type/int.html>, <https://yaml.org/type/float.html>), with
/// PyYAML's variants of the float forms.
fn is_yaml11_number(s: &str) -> bool {
    if matches!(s, ".nan" | ".NaN" | ".NAN") {
        return true;
    }
    let u = s.strip_prefix(['-', '+']).unwrap_or(s);
    if matches!(u, ".inf" | ".Inf" | ".INF") {
        return true;
    }
    // Ints: 0b…, 0x…, 0… (octal), decimal, sexagesimal.
    if let Some(r) = u.strip_prefix("0b") {
        return !r.is_empty() && all(r, |c| matches!(c, b'0' | b'1' | b'_'));
    }
    if let Some(r) = u.strip_prefix("0x") {
        return !r.is_empty() && all(r, |c| c.is_ascii_hexdigit() || c == b'_');
    }
    if !u.is_empty() && all(u, digit_) && u.as_bytes()[0].is_ascii_digit() {
        return true; // 0, 0[0-7_]+, [1-9][0-9_]* and, conservatively, 08 / 09 octal look-alikes.
    }
    // Sexagesimal int `[1-9][0-9_]*(:[0-5]?[0-9])+` and float `[0-9][0-9_]*(:[0-5]?[0-9])+\.[0-9_]*`.
    if let Some(colon) = u.find(':') {
        let (head, tail) = u.split_at(colon);
        let head_ok = !head.is_empty() && head.as_bytes()[0].is_ascii_digit() && all(head, digit_);
        if head_ok {
            if sexagesimal_tail(tail) {
                return true;
            }
            if let Some(dot) = tail.find('.') {
                let (t, frac) = tail.split_at(dot);
                if sexagesimal_tail(t) && all(&frac[1..], digit_) {
                    return true;
                }
            }
        }
        return false;
    }
    // Floats: `([0-9][0-9_]*)?\.[0-9._]*([eE][-+][0-9]+)?` (the spec allows dots after the point, PyYAML
    // underscores; both are taken).
    let (mantissa, exponent) = match u.find(['e', 'E']) {
        Some(i) => (&u[..i], Some(&u[i + 1..])),
        None => (u, None),
    };
    let Some(dot) = mantissa.find('.') else {
        return false;
    };
    let (int, frac) = mantissa.split_at(dot);
    let int_ok = int.is_empty() || (int.as_bytes()[0].is_ascii_digit() && all(int, digit_));
    let frac_ok = all(&frac[1..], |c| c.is_ascii_digit() || c == b'.' || c == b'_');
    let exp_ok = match exponent {
        None => true,
        Some(e) => e.len() > 1 && e.starts_with(['-', '+']) && all(&e[1..], |c| c.is_ascii_digit()),
    };
    // A lone "." (the spec's form allows it) is a float to a strict 1.1 reader.
    int_ok && frac_ok && exp_ok
}

/// go-yaml v2 resolves a plain scalar starting with a digit, sign or dot as a number when Go's
/// `strconv.ParseInt(s, 0, 64)` or `ParseFloat(s, 64)` accepts it with underscores removed. Approximated from
/// above: any integer with a base prefix, anything Rust's float parser accepts (`1e3`, `+inf`, `nan`), and
/// hexadecimal floats.
fn is_go_number(s: &str) -> bool {
    if !s.starts_with(|c: char| c.is_ascii_digit() || matches!(c, '+' | '-' | '.')) {
        return false;
    }
    let plain: String = s.chars().filter(|&c| c != '_').collect();
    let u = plain.strip_prefix(['-', '+']).unwrap_or(&plain);
    let prefixed = |p: &[&str], ok: fn(u8) -> bool| {
        p.iter().any(|p| {
            u.strip_prefix(p)
                .is_some_and(|r| !r.is_empty() && all(r, ok))
        })
    };
    prefixed(&["0x", "0X"], |c| {
        c.is_ascii_hexdigit() || matches!(c, b'.' | b'p' | b'P' | b'+' | b'-')
    }) || prefixed(&["0o", "0O"], |c| c.is_ascii_digit())
        || prefixed(&["0b", "0B"], |c| c.is_ascii_digit())
        || (!u.is_empty() && all(u, |c| c.is_ascii_digit()))
        || plain.parse::<f64>().is_ok()
}

/// YAML 1.1 timestamp (<https://yaml.org/type/timestamp.html>): `YYYY-MM-DD`, or a date and time with
/// optional fraction and zone.
fn is_yaml11_timestamp(s: &str) -> bool {
    let b = s.as_bytes();
    let digits = |r: &[u8], min: usize, max: usize| -> Option<usize> {
        let n = r
            .iter()
            .take(max)
            .take_while(|c| c.is_ascii_digit())
            .count();
        (n >= min).then_some(n)
    };
    let mut i = 0;
    let Some(n) = digits(b, 4, 4) else {
        return false;
    };
    i += n;
    let two = |i: &mut usize, min: usize| -> bool {
        if b.get(*i) != Some(&b'-') {
            return false;
        }
        *i += 1;
        match digits(&b[*i..], min, 2) {
            Some(n) => {
                *i += n;
                true
            }
            None => false,
        }
    };
    if !two(&mut i, 1) || !two(&mut i, 1) {
        return false;
    }
    if i == b.len() {
        return true; // YYYY-M-D is not a date to the 1.1 regex, but quoting it costs nothing.
    }
    // Separator: T, t, or blanks.
    match b[i] {
        b'T' | b't' => i += 1,
        b' ' | b'\t' => {
            while i < b.len() && matches!(b[i], b' ' | b'\t') {
                i += 1;
            }
        }
        _ => return false,
    }
    let Some(n) = digits(&b[i..], 1, 2) else {
        return false;
    };
    i += n;
    for _ in 0..2 {
        if b.get(i) != Some(&b':') {
            return false;
        }
        i += 1;
        if digits(&b[i..], 2, 2).is_none() {
            return false;
        }
        i += 2;
    }
    if b.get(i) == Some(&b'.') {
        i += 1;
        while i < b.len() && b[i].is_ascii_digit() {
            i += 1;
        }
    }
    while i < b.len() && matches!(b[i], b' ' | b'\t') {
        i += 1;
    }
    if i == b.len() {
        return true;
    }
    match b[i] {
        b'Z' => i + 1 == b.len(),
        b'+' | b'-' => {
            i += 1;
            let Some(n) = digits(&b[i..], 1, 2) else {
                return false;
            };
            i += n;
            if b.get(i) == Some(&b':') {
                i += 1;
                if digits(&b[i..], 2, 2).is_none() {
                    return false;
                }
                i += 2;
            }
            i == b.len()
        }
        _ => false,
    }
}

/// Parses YAML after the depth check. Errors are messages (with line and column where the parser gives them).
pub fn from_str<T: DeserializeOwned>(text: &str) -> Result<T, String> {
    check_depth(text)?;
    serde_yaml_ng::from_str(text).map_err(|e| e.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shallow_documents_pass() {
        assert!(check_depth("a: {b: [1, 2, {c: \"[[[[\"}]}\n# [[[[[[\n- - x\n").is_ok());
    }

    #[test]
    fn deep_flow_block_and_dash_nesting_are_refused() {
        let flow = format!("a: {}1{}", "[".repeat(65), "]".repeat(65));
        assert!(check_depth(&flow).unwrap_err().contains("deeper than 64"));
        let block: String = (0..70)
            .map(|i| format!("{}k{i}:\n", " ".repeat(2 * i)))
            .collect();
        assert!(check_depth(&block).is_err());
        let dashes = format!("{}x\n", "- ".repeat(70));
        assert!(check_depth(&dashes).is_err());
        assert!(from_str::<serde_json::Value>(&flow).is_err());
    }
}
