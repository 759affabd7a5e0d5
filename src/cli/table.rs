//! The text tables of `--format table`, drawn by comfy-table in one borderless style, so a command states only
//! its columns and its rows.
//!
//! The look is the one the commands had when they wrote their tables by hand: no borders, one space between
//! columns (a column may ask for more), text to the left, figures to the right, and each column at least as wide
//! as it was then. What comfy-table adds is that a cell wider than that widens its whole column instead of
//! pushing the rest of its row out of line; widths are measured in terminal cells (`unicode-width`), not in
//! `char`s. Lines carry no trailing spaces. Cells are printed as given: a command passes text from files, the
//! store or the network through [`super::terminal::safe`] first, as before.

use comfy_table::{CellAlignment, ColumnConstraint, Width, presets};

/// One column: the text heading it, where its cells sit, its least width and the spaces before it.
#[derive(Clone, Copy, Debug)]
pub(super) struct Column<'a> {
    header: &'a str,
    align: CellAlignment,
    min_width: u16,
    /// Spaces between this column and the previous one (before the line, for the first); `None`: one, or none
    /// for the first column.
    gap: Option<u16>,
}

/// A column of text (names, labels), its cells to the left, at least `min_width` wide.
pub(super) fn left(header: &str, min_width: u16) -> Column<'_> {
    Column {
        header,
        align: CellAlignment::Left,
        min_width,
        gap: None,
    }
}

/// A column of figures, its cells to the right, at least `min_width` wide.
pub(super) fn right(header: &str, min_width: u16) -> Column<'_> {
    Column {
        header,
        align: CellAlignment::Right,
        min_width,
        gap: None,
    }
}

impl Column<'_> {
    /// `spaces` before this column instead of one (an indent, for the first column).
    pub(super) fn gap(self, spaces: u16) -> Self {
        Self {
            gap: Some(spaces),
            ..self
        }
    }
}

/// A table being filled row by row; [`Table::render`] draws it.
pub(super) struct Table<'a> {
    columns: Vec<Column<'a>>,
    grid: comfy_table::Table,
}

impl<'a> Table<'a> {
    /// A table whose first line names its columns.
    pub(super) fn new(columns: &[Column<'a>]) -> Self {
        let mut t = Self::headless(columns);
        t.grid.set_header(columns.iter().map(|c| c.header));
        t
    }

    /// A table without a header line: labelled lines (`inspect`, `probe`) whose headers are not printed.
    pub(super) fn headless(columns: &[Column<'a>]) -> Self {
        let mut grid = comfy_table::Table::new();
        grid.load_style(presets::NOTHING);
        Self {
            columns: columns.to_vec(),
            grid,
        }
    }

    /// One row, a cell per column in order; a row may stop short (the missing cells are blank).
    pub(super) fn row<I>(&mut self, cells: I) -> &mut Self
    where
        I: IntoIterator,
        I::Item: std::fmt::Display,
    {
        self.grid.add_row(
            cells
                .into_iter()
                .map(comfy_table::Cell::new)
                .collect::<Vec<_>>(),
        );
        self
    }

    /// The table's lines, each ending in a line feed, without trailing spaces; nothing for a table with
    /// neither a header nor a row.
    pub(super) fn render(mut self) -> String {
        self.grid.discover_columns();
        for (i, column) in self.grid.column_iter_mut().enumerate() {
            let Some(spec) = self.columns.get(i) else {
                continue;
            };
            let gap = spec.gap.unwrap_or(u16::from(i > 0));
            column.set_padding((gap, 0));
            column.set_cell_alignment(spec.align);
            // The least width counts the padding (comfy-table's `LowerBoundary`).
            column.set_constraint(ColumnConstraint::LowerBoundary(Width::Fixed(
                spec.min_width.saturating_add(gap),
            )));
        }
        let mut out = String::new();
        for line in self.grid.lines() {
            out.push_str(line.trim_end());
            out.push('\n');
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn columns_keep_their_least_width_alignment_and_gap() {
        let mut t = Table::new(&[left("name", 6), right("bytes", 8), left("note", 0).gap(2)]);
        t.row(["a", "12", "x"]).row(["bb", "3456", ""]);
        assert_eq!(
            t.render(),
            "name      bytes  note\n\
             a            12  x\n\
             bb         3456\n"
        );
    }

    #[test]
    fn a_wide_cell_widens_its_column_and_the_header_aligns_with_it() {
        let mut t = Table::new(&[left("k", 2), right("v", 3)]);
        t.row(["a-long-key", "1"]).row(["b", "12345"]);
        assert_eq!(
            t.render(),
            "k              v\n\
             a-long-key     1\n\
             b          12345\n"
        );
    }

    #[test]
    fn a_headless_table_indents_its_first_column_and_blanks_short_rows() {
        let mut t = Table::headless(&[left("", 5).gap(2), right("", 4), left("", 0)]);
        t.row(["ab", "1", "of 9"]).row(["c", "22"]).row(["d"]);
        assert_eq!(t.render(), "  ab       1 of 9\n  c       22\n  d\n");
    }

    #[test]
    fn a_wide_character_counts_as_two_cells() {
        let mut t = Table::headless(&[left("", 0), left("", 0)]);
        t.row(["漢", "x"]).row(["ab", "y"]).row(["abc", "z"]);
        assert_eq!(t.render(), "漢  x\nab  y\nabc z\n");
    }

    #[test]
    fn an_empty_table_renders_nothing() {
        assert_eq!(Table::headless(&[left("", 3)]).render(), "");
    }
}
