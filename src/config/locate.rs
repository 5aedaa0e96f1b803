//! Maps between byte offsets in a TOML file and the key paths a reader
//! understands (`routes[2].verify.secrets[0]`), so every config error can name
//! both the line/column and the key.
//!
//! Validation works on typed values that no longer carry spans; instead of
//! threading `Spanned<T>` through every struct, it reports a [`KeyPath`] and
//! this module finds that path again in a span-preserving parse of the same
//! text.

use std::fmt;
use std::ops::Range;

use toml_edit::{Array, ArrayOfTables, ImDocument, InlineTable, Item, Table, Value};

/// One step of a key path: a table key or an array index.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Segment {
    Key(String),
    Index(usize),
}

/// A path into the TOML document, rendered like `routes[2].verify.scheme`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct KeyPath(Vec<Segment>);

impl KeyPath {
    pub fn root() -> Self {
        Self::default()
    }

    pub fn key(&self, key: &str) -> Self {
        let mut next = self.clone();
        next.0.push(Segment::Key(key.to_owned()));
        next
    }

    pub fn index(&self, index: usize) -> Self {
        let mut next = self.clone();
        next.0.push(Segment::Index(index));
        next
    }
}

impl fmt::Display for KeyPath {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, segment) in self.0.iter().enumerate() {
            match segment {
                Segment::Key(key) if i == 0 => write!(f, "{key}")?,
                Segment::Key(key) => write!(f, ".{key}")?,
                Segment::Index(index) => write!(f, "[{index}]")?,
            }
        }
        Ok(())
    }
}

/// 1-based line and column of a byte offset.
pub fn line_col(text: &str, offset: usize) -> (usize, usize) {
    let before = &text[..offset.min(text.len())];
    let line = before.matches('\n').count() + 1;
    let column = before
        .rfind('\n')
        .map_or(before.len(), |nl| before.len() - nl - 1)
        + 1;
    (line, column)
}

/// A span-preserving view of the config text.
pub struct Locator {
    doc: Option<ImDocument<String>>,
}

impl Locator {
    pub fn new(text: &str) -> Self {
        Self {
            doc: ImDocument::parse(text.to_owned()).ok(),
        }
    }

    /// Byte span of the value at `path`, or of the nearest enclosing value
    /// that exists (a missing key is reported where it should have been).
    pub fn span_of(&self, path: &KeyPath) -> Option<Range<usize>> {
        let doc = self.doc.as_ref()?;
        let mut node = Node::Table(doc.as_table());
        let mut best = node.span();
        for segment in &path.0 {
            match node.child(segment) {
                Some(child) => {
                    best = child.span().or(best);
                    node = child;
                }
                None => break,
            }
        }
        best
    }

    /// The key path of the innermost key (or value) containing `offset`.
    pub fn path_at(&self, offset: usize) -> KeyPath {
        let mut path = KeyPath::root();
        if let Some(doc) = &self.doc {
            let mut node = Node::Table(doc.as_table());
            while let Some((segment, child)) = node.child_at(offset) {
                path.0.push(segment);
                node = child;
            }
        }
        path
    }
}

/// A borrowed position in the document, uniform over the shapes TOML has.
enum Node<'a> {
    Table(&'a Table),
    Inline(&'a InlineTable),
    Tables(&'a ArrayOfTables),
    Array(&'a Array),
    Leaf(Option<Range<usize>>),
}

impl<'a> Node<'a> {
    fn of_item(item: &'a Item) -> Self {
        match item {
            Item::Table(table) => Node::Table(table),
            Item::ArrayOfTables(tables) => Node::Tables(tables),
            Item::Value(value) => Node::of_value(value),
            Item::None => Node::Leaf(None),
        }
    }

    fn of_value(value: &'a Value) -> Self {
        match value {
            Value::InlineTable(table) => Node::Inline(table),
            Value::Array(array) => Node::Array(array),
            other => Node::Leaf(other.span()),
        }
    }

    fn span(&self) -> Option<Range<usize>> {
        match self {
            Node::Table(table) => table.span(),
            Node::Inline(table) => table.span(),
            Node::Tables(tables) => tables.span(),
            Node::Array(array) => array.span(),
            Node::Leaf(span) => span.clone(),
        }
    }

    fn child(&self, segment: &Segment) -> Option<Node<'a>> {
        match (self, segment) {
            (Node::Table(table), Segment::Key(key)) => table.get(key).map(Node::of_item),
            (Node::Inline(table), Segment::Key(key)) => table.get(key).map(Node::of_value),
            (Node::Tables(tables), Segment::Index(i)) => tables.get(*i).map(Node::Table),
            (Node::Array(array), Segment::Index(i)) => array.get(*i).map(Node::of_value),
            _ => None,
        }
    }

    fn child_at(&self, offset: usize) -> Option<(Segment, Node<'a>)> {
        let hit = |span: Option<Range<usize>>| span.is_some_and(|s| s.contains(&offset));
        match self {
            Node::Table(table) => table.iter().find_map(|(key, item)| {
                let node = Node::of_item(item);
                let key_span = table.key(key).and_then(|k| k.span());
                (hit(key_span) || hit(node.span())).then(|| (Segment::Key(key.to_owned()), node))
            }),
            Node::Inline(table) => table.iter().find_map(|(key, value)| {
                let node = Node::of_value(value);
                let key_span = table.key(key).and_then(|k| k.span());
                (hit(key_span) || hit(node.span())).then(|| (Segment::Key(key.to_owned()), node))
            }),
            Node::Tables(tables) => tables.iter().enumerate().find_map(|(i, table)| {
                hit(table.span()).then_some((Segment::Index(i), Node::Table(table)))
            }),
            Node::Array(array) => array.iter().enumerate().find_map(|(i, value)| {
                let node = Node::of_value(value);
                hit(node.span()).then_some((Segment::Index(i), node))
            }),
            Node::Leaf(_) => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const TEXT: &str = "[server]\nlisten = \"x\"\n\n[[routes]]\nname = \"a\"\n\n[[routes]]\nname = \"b\"\nverify = { scheme = \"none\", secrets = [\"s1\", \"s2\"] }\n";

    fn path(parts: &[&str]) -> KeyPath {
        parts
            .iter()
            .fold(KeyPath::root(), |p, part| match part.parse::<usize>() {
                Ok(i) => p.index(i),
                Err(_) => p.key(part),
            })
    }

    #[test]
    fn finds_spans_of_nested_values() {
        let locator = Locator::new(TEXT);
        let at = |parts: &[&str]| {
            let span = locator.span_of(&path(parts)).expect("span");
            line_col(TEXT, span.start)
        };
        assert_eq!(at(&["server", "listen"]), (2, 10));
        assert_eq!(at(&["routes", "1", "name"]), (8, 8));
        assert_eq!(at(&["routes", "1", "verify", "secrets", "1"]), (9, 46));
        // A missing key points at its enclosing table.
        assert_eq!(at(&["routes", "0", "upstream"]).0, 4);
    }

    #[test]
    fn renders_and_recovers_paths() {
        let locator = Locator::new(TEXT);
        let offset = TEXT.find("\"s2\"").unwrap();
        let found = locator.path_at(offset);
        assert_eq!(found.to_string(), "routes[1].verify.secrets[1]");
        assert_eq!(line_col(TEXT, 0), (1, 1));
    }
}
