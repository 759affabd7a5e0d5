//! YAML out: [`to_string`] and the YAML 1.1 scalar resolution it quotes against ([`yaml11_retypes`]: the bools,
//! nulls, numbers and timestamps of YAML 1.1 and go-yaml v2), so that YAML 1.1 readers read our output back
//! unchanged.

use serde::Serialize;

use super::scanner::Scanner;

/// YAML that YAML 1.1 readers read back unchanged: serde_yaml_ng's output, with every plain scalar that it
/// wrote for a string and that a YAML 1.1 reader would retype ([`yaml11_retypes`]) single-quoted, and every
/// float written in a form YAML 1.1 does not know (`1e-5`, `1.5e7`: PyYAML wants a point and a signed
/// exponent) rewritten as `1.0e-5`, `1.5e+7`.
///
/// serde_yaml_ng has no per-scalar style, so the text it emits is scanned with a libyaml-faithful scanner for
/// its plain scalars; serde_yaml_ng itself says
/// which of them are typed values (it quotes every string a YAML 1.2 reader would retype, so a plain scalar it
/// reads as a number, boolean or null is one).
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
