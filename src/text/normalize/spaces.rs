//! Pass 5: spaces.

/// Pass 5: runs of spaces become one space, spaces at line ends are dropped, three or
/// more newlines become a blank line, and the result is trimmed.
pub fn collapse_spaces(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut space = false;
    let mut newlines = 0usize;
    for c in text.chars() {
        match c {
            '\n' => {
                newlines += 1;
                space = false;
            }
            c if c.is_whitespace() => space = true,
            c => {
                if !out.is_empty() {
                    if newlines > 0 {
                        out.push_str(if newlines >= 2 { "\n\n" } else { "\n" });
                    } else if space {
                        out.push(' ');
                    }
                }
                newlines = 0;
                space = false;
                out.push(c);
            }
        }
    }
    out
}
