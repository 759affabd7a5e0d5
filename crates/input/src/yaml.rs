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
    Scanner::new(text.as_bytes(), MAX_DEPTH, false)
        .run()
        .map(|_| ())
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
    /// Deepest nesting accepted ([`MAX_DEPTH`] for input).
    max_depth: usize,
    /// Byte ranges of the plain scalars, when collected (for [`to_string`]).
    plain: Option<Vec<(usize, usize)>>,
}

impl<'a> Scanner<'a> {
    fn new(b: &'a [u8], max_depth: usize, collect_plain: bool) -> Self {
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
            max_depth,
            plain: collect_plain.then(Vec::new),
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
        if self.flow_level + self.indents.len() > self.max_depth {
            return Err(format!(
                "line {}: nested deeper than {} levels",
                self.line + 1,
                self.max_depth
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

    /// Scans to the end; returns the plain scalars' byte ranges when they were collected.
    fn run(mut self) -> Result<Vec<(usize, usize)>, String> {
        loop {
            self.scan_to_next_token();
            self.stale_simple_keys();
            self.unroll_indent(self.column);
            let Some(c) = self.at(0) else {
                return Ok(self.plain.unwrap_or_default());
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
        while !(self.is_blankz(0) || (self.flow_level > 0 && self.is(0, b','))) {
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
        let start = self.pos;
        let mut end = self.pos;
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
                end = self.pos;
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
        if let Some(p) = &mut self.plain {
            p.push((start, end));
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

/// YAML that YAML 1.1 readers read back unchanged: serde_yaml_ng's output, with every plain scalar that it
/// wrote for a string and that a YAML 1.1 reader would retype ([`yaml11_retypes`]) single-quoted, and every
/// float written in a form YAML 1.1 does not know (`1e-5`, `1.5e7`: PyYAML wants a point and a signed
/// exponent) rewritten as `1.0e-5`, `1.5e+7`.
///
/// serde_yaml_ng has no per-scalar style, so the text it emits is scanned with the same libyaml-faithful
/// scanner as input ([`check_depth`]) for its plain scalars; serde_yaml_ng itself says which of them are
/// typed values (it quotes every string a YAML 1.2 reader would retype, so a plain scalar it reads as a
/// number, boolean or null is one).
pub fn to_string<T: Serialize + ?Sized>(value: &T) -> Result<String, serde_yaml_ng::Error> {
    let text = serde_yaml_ng::to_string(value)?;
    // Our own output has no depth bound to enforce; the scan cannot fail.
    let Ok(spans) = Scanner::new(text.as_bytes(), usize::MAX, true).run() else {
        return Ok(text);
    };
    let mut out = String::with_capacity(text.len() + 16);
    let mut last = 0;
    for (start, end) in spans {
        let scalar = &text[start..end];
        let Some(fixed) = fix_plain(scalar) else {
            continue;
        };
        out.push_str(&text[last..start]);
        out.push_str(&fixed);
        last = end;
    }
    out.push_str(&text[last..]);
    Ok(out)
}

/// The replacement for one plain scalar of serde_yaml_ng's output, if it needs one.
fn fix_plain(scalar: &str) -> Option<String> {
    if scalar.contains(['\n', '\r']) {
        return None; // Folded over lines: holds spaces, which no YAML 1.1 type but timestamps does.
    }
    let exponent_float = scalar
        .starts_with(|c: char| c.is_ascii_digit() || matches!(c, '-' | '+' | '.'))
        && scalar.contains(['e', 'E']);
    if !exponent_float && !yaml11_retypes(scalar) {
        return None;
    }
    match serde_yaml_ng::from_str::<serde_yaml_ng::Value>(scalar) {
        Ok(serde_yaml_ng::Value::String(_)) if yaml11_retypes(scalar) => {
            Some(format!("'{}'", scalar.replace('\'', "''")))
        }
        Ok(serde_yaml_ng::Value::Number(n)) if n.is_f64() => yaml11_float(scalar),
        _ => None,
    }
}

/// `1e-5` → `1.0e-5`, `1.5e7` → `1.5e+7`: the float forms YAML 1.1 (and PyYAML) read as floats; `None` when
/// the text already is one.
fn yaml11_float(s: &str) -> Option<String> {
    let i = s.find(['e', 'E'])?;
    let (mantissa, exponent) = (&s[..i], &s[i + 1..]);
    let mantissa = if mantissa.contains('.') {
        mantissa.to_owned()
    } else {
        format!("{mantissa}.0")
    };
    let exponent = if exponent.starts_with(['+', '-']) {
        exponent.to_owned()
    } else {
        format!("+{exponent}")
    };
    let fixed = format!("{mantissa}e{exponent}");
    (fixed != s).then_some(fixed)
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

    /// Levels hidden in the adversarial documents: far past [`MAX_DEPTH`], few enough that a scan stays
    /// instant in a debug build (the scan stops at level 65 anyway; nothing here reaches libyaml).
    const HIDDEN: usize = 10_000;

    fn hidden(prefix: &str) -> String {
        format!("{prefix}{}{}", "[".repeat(HIDDEN), "]".repeat(HIDDEN))
    }

    #[test]
    fn a_hash_inside_a_plain_scalar_does_not_start_a_comment() {
        // libyaml: `a#b` is one plain scalar (a comment needs a blank before `#`).
        assert!(check_depth(&hidden("[a#b, ")).is_err());
        assert!(check_depth(&hidden("k: a#b\nj: ")).is_err());
        // A real comment still hides what follows it on its line.
        assert!(check_depth(&format!("[a, #{}\n]", "[".repeat(HIDDEN))).is_ok());
        assert!(check_depth(&format!("[#{}\n]", "[".repeat(HIDDEN))).is_ok());
    }

    #[test]
    fn a_quote_inside_a_plain_scalar_does_not_start_a_string() {
        assert!(check_depth(&hidden("[a'b, ")).is_err());
        assert!(check_depth(&hidden("[a\"b, ")).is_err());
        assert!(check_depth(&hidden("k: it's\nj: ")).is_err());
        // Continued on the next line of a block plain scalar, still not a string.
        assert!(check_depth(&hidden("k: a\n 'b\nj: ")).is_err());
    }

    #[test]
    fn escaped_quotes_do_not_end_a_string_early_or_late() {
        assert!(check_depth(&hidden("[\"\\\"\", ")).is_err());
        assert!(check_depth(&hidden("['it''s', ")).is_err());
        assert!(check_depth(&hidden("[\"a\\\\\", ")).is_err());
        // Inside a string, brackets are text.
        assert!(check_depth(&format!("k: '{}'", "[".repeat(HIDDEN))).is_ok());
        assert!(check_depth(&format!("k: \"\\\"{}\"", "[".repeat(HIDDEN))).is_ok());
    }

    #[test]
    fn closers_inside_strings_and_comments_do_not_cancel_openers() {
        let quoted = format!("{}x", "[ ']', ".repeat(100));
        assert!(check_depth(&quoted).is_err());
        let commented = format!("{}x", "[ # ]\n".repeat(100));
        assert!(check_depth(&commented).is_err());
    }

    #[test]
    fn block_scalars_end_where_libyaml_ends_them() {
        // The quote is content of the block scalar; the next key is structure.
        assert!(check_depth(&hidden("a: |\n  it's\nb: ")).is_err());
        // A block scalar's content needs more indentation than its parent mapping (at column 2 here).
        assert!(check_depth(&hidden("- a: |\n  b: ")).is_err());
        // Content lines, however odd, hide nothing.
        assert!(check_depth(&format!("a: |\n  {}\nb: 1\n", "[".repeat(HIDDEN))).is_ok());
        assert!(check_depth(&format!("a: >-\n\n   x\n   {}\n", "[".repeat(HIDDEN))).is_ok());
    }

    #[test]
    fn tags_anchors_and_document_markers_hide_nothing() {
        assert!(check_depth(&hidden("--- !t'x ")).is_err());
        assert!(check_depth(&hidden("- &a x'y\n- ")).is_err());
        assert!(check_depth(&hidden("%YAML 1.1\n--- ")).is_err());
        assert!(check_depth(&hidden("k: \"x\n--- ")).is_err());
    }

    #[test]
    fn line_breaks_of_every_kind_count() {
        for br in ["\r", "\r\n", "\u{85}", "\u{2028}"] {
            assert!(check_depth(&hidden(&format!("# c{br}"))).is_err(), "{br:?}");
        }
    }

    /// Random documents mixing hiding tricks around 130 real levels (past serde_yaml_ng's recursion limit of
    /// 128): whenever the check passes a document, libyaml must not find it nested past the limit. The oracle is
    /// libyaml itself, so the scanner cannot agree with itself by construction.
    #[test]
    fn the_check_never_passes_what_libyaml_finds_deep() {
        const PIECES: &[&str] = &[
            "[", "]", "{", "}", ", ", " ", "\n", "  ", "a", "b: ", "- ", "? ", ": ", "'", "\"",
            "\\", "#", " #", "|", ">", "|-\n", "&x ", "*x", "!t ", "'x'", "\"y\"", "''", "--- ",
            "\t", "a#b", "it's", "\"\\\"\"", "a:b", "%Y\n",
        ];
        let deep = |n: usize, open: &str, close: &str| (open.repeat(n), close.repeat(n));
        let mut state: u64 = 0x9E37_79B9_7F4A_7C15;
        let mut next = move || {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            state
        };
        let mut deep_found = 0;
        for _ in 0..3_000 {
            let mut doc = String::new();
            for _ in 0..(next() % 6) {
                doc.push_str(PIECES[(next() % PIECES.len() as u64) as usize]);
            }
            let (open, close) = if next() % 2 == 0 {
                deep(130, "[", "]")
            } else {
                deep(130, "- ", "")
            };
            doc.push_str(&open);
            doc.push('x');
            doc.push_str(&close);
            for _ in 0..(next() % 4) {
                doc.push_str(PIECES[(next() % PIECES.len() as u64) as usize]);
            }
            let libyaml = serde_yaml_ng::from_str::<serde_yaml_ng::Value>(&doc);
            let too_deep = libyaml
                .as_ref()
                .is_err_and(|e| e.to_string().contains("recursion limit"));
            if too_deep {
                deep_found += 1;
                assert!(check_depth(&doc).is_err(), "passed, libyaml nests: {doc:?}");
            }
        }
        assert!(
            deep_found > 300,
            "only {deep_found} documents reached the limit"
        );
    }

    #[test]
    fn real_documents_pass() {
        for text in [
            "a: b\nc:\n  - d\n  - {e: [f, g]}\n# [[[\nh: 'it''s [' # ]\ni: |\n  [[[\n  ]]\n",
            "- - - x\n- ? k\n  : v\n",
            "a: \"x\\\" [ \"\nb: [1, 2]\n",
        ] {
            assert!(check_depth(text).is_ok(), "{text:?}");
        }
    }

    #[test]
    fn output_quotes_what_yaml_1_1_retypes_and_keeps_the_rest() {
        let v = serde_json::json!({"argv": ["-fa", "on", "-c", "8192"], "on": "yes", "n": 1e-5, "x": 1.5e20,
            "t": true, "z": null, "s": "0777", "d": "2001-12-14", "k": "llama-server"});
        let y = to_string(&v).unwrap();
        for want in [
            "- -fa\n",
            "- 'on'\n",
            "- '8192'\n",
            "'on': 'yes'\n",
            "'n': 0.00001\n",
            "x: 1.5e+20\n",
            "t: true\n",
            "z: null\n",
            "s: '0777'\n",
            "d: '2001-12-14'\n",
            "k: llama-server\n",
        ] {
            assert!(y.contains(want), "{want:?} in\n{y}");
        }
        let back: serde_json::Value = serde_yaml_ng::from_str(&y).unwrap();
        assert_eq!(back, v);
        // serde_yaml_ng writes f32 in ryu's shortest form, `1e-7`, which PyYAML reads as a string.
        #[derive(serde::Serialize)]
        struct Eps {
            eps: f32,
            big: f32,
            plain: f32,
        }
        let eps = Eps {
            eps: 1e-7,
            big: 1e20,
            plain: 0.25,
        };
        assert_eq!(
            serde_yaml_ng::to_string(&eps).unwrap(),
            "eps: 1e-7\nbig: 1e20\nplain: 0.25\n"
        );
        assert_eq!(
            to_string(&eps).unwrap(),
            "eps: 1.0e-7\nbig: 1.0e+20\nplain: 0.25\n"
        );
    }

    #[test]
    fn yaml_1_1_scalars_are_recognised() {
        for s in [
            "y",
            "NO",
            "on",
            "Off",
            "~",
            "",
            "0b101",
            "0777",
            "0x_1F",
            "-1_000",
            "1:20",
            "190:20:30.15",
            ".5",
            "1.",
            "-.INF",
            ".NaN",
            "1e3",
            "6.8523015e+5",
            "2001-12-14",
            "2001-12-14 21:59:43.10 -5",
            "2001-12-14t21:59:43.10-05:00",
            "=",
            "<<",
            "+inf",
            "0o17",
        ] {
            assert!(yaml11_retypes(s), "{s:?}");
        }
        for s in [
            "llama", "-fa", "q4_0", "1:60", "0x", "cuda:0", "2001-12", "yes!", "x1e3", "8.9.x",
        ] {
            assert!(!yaml11_retypes(s), "{s:?}");
        }
    }
}
