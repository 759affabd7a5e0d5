//! A libyaml-faithful tokenizer: the part of libyaml's scanner (unsafe-libyaml 0.2.11, `scanner.rs`) that decides
//! nesting and where each token begins and ends, followed token by token so that no structure hides in what a
//! simpler scan would take for a string or a comment. [`super::to_string`] runs it unbounded to find the plain
//! scalars of serde_yaml_ng's output; the tests run it with a depth bound, against libyaml, as the depth check
//! input once went through (input is now bounded by serde-saphyr's budgets).

/// libyaml forgets a possible simple key (`key: value`) after this many characters (`scanner.rs`,
/// `yaml_parser_stale_simple_keys`); the scan follows it so the block indentation it rolls stays libyaml's.
const SIMPLE_KEY_MAX_CHARS: u64 = 1024;

/// A possible simple key: where a token that may turn out to be a mapping key began.
#[derive(Debug, Clone, Copy, Default)]
struct SimpleKey {
    possible: bool,
    line: u64,
    column: i64,
    index: u64,
}

/// A document nested past the scanner's depth bound; `line` counts from 1.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("line {line}: nested deeper than {max_depth} levels")]
pub(crate) struct TooDeep {
    pub(crate) line: u64,
    pub(crate) max_depth: usize,
}

/// The part of libyaml's scanner state that decides nesting and token extents. Positions count characters,
/// as libyaml's marks do.
pub(super) struct Scanner<'a> {
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
    /// Deepest nesting accepted ([`MAX_DEPTH`](super::MAX_DEPTH) for input).
    max_depth: usize,
    /// Byte ranges of the plain scalars, when collected (for [`to_string`](super::to_string)).
    plain: Option<Vec<(usize, usize)>>,
}

impl<'a> Scanner<'a> {
    pub(super) fn new(b: &'a [u8], max_depth: usize, collect_plain: bool) -> Self {
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

    fn too_deep(&self) -> Result<(), TooDeep> {
        if self.flow_level + self.indents.len() > self.max_depth {
            return Err(TooDeep {
                line: self.line + 1,
                max_depth: self.max_depth,
            });
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

    fn roll_indent(&mut self, column: i64) -> Result<(), TooDeep> {
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
    pub(super) fn run(mut self) -> Result<Vec<(usize, usize)>, TooDeep> {
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
