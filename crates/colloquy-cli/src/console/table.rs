//! Rows of cells as aligned text: what `colloquy nodes` and `colloquy sessions` print.

/// Each row as one line, every column padded to its widest cell, two spaces apart (trailing
/// spaces trimmed). Cells are printed as they are: make them safe first ([`super::clean`]).
pub fn aligned(rows: &[Vec<String>]) -> Vec<String> {
    let columns = rows.iter().map(Vec::len).max().unwrap_or(0);
    let mut widths = vec![0; columns];
    for row in rows {
        for (width, cell) in widths.iter_mut().zip(row) {
            *width = (*width).max(cell.chars().count());
        }
    }
    rows.iter()
        .map(|row| {
            let cells = row.iter().zip(&widths).map(|(cell, &width)| format!("{cell:width$}"));
            cells.collect::<Vec<_>>().join("  ").trim_end().to_owned()
        })
        .collect()
}
