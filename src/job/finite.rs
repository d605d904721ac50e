//! Refusing NaN and ±Infinity before a Rust value becomes stored JSON.
//!
//! JSON has no NaN or Infinity, and serde_json writes a non-finite `f32`/`f64` as `null`
//! without a word (its `Value` has no place for one, and its writer never shows one to a
//! `Formatter`). So a typed payload whose `ratio` came out NaN would be stored, and run, with
//! `"ratio": null`. [`to_json_value`] first walks the value with [`Walk`], a
//! [`serde::Serializer`] that writes nothing and fails on the first non-finite float, naming
//! where it is; then serializes it with serde_json as usual.

use std::fmt;

use serde::ser::{self, Serialize};
use serde_json::Value;

use crate::error::{Error, Result};

/// `value` as JSON, or [`ErrorKind::InvalidJob`](crate::ErrorKind::InvalidJob) naming the
/// first non-finite float: "payload field `points[2].y` is NaN; JSON has no NaN or
/// Infinity". `what` names the value in messages ("payload").
pub(crate) fn to_json_value<T: Serialize + ?Sized>(value: &T, what: &str) -> Result<Value> {
    let mut path = Vec::new();
    match value.serialize(Walk { path: &mut path }) {
        Err(WalkError::NonFinite { path, value }) => {
            let value = if value.is_nan() {
                "NaN"
            } else if value > 0.0 {
                "Infinity"
            } else {
                "-Infinity"
            };
            let place = if path.is_empty() {
                what.to_string()
            } else {
                format!("{what} field `{path}`")
            };
            return Err(Error::invalid_job(format!(
                "{place} is {value}; JSON has no NaN or Infinity"
            )));
        }
        // Any other failure (a map key that is not a string, a Serialize impl that fails) is
        // serde_json's to report, below, in its own words.
        Err(WalkError::Other(_)) | Ok(()) => {}
    }
    serde_json::to_value(value)
        .map_err(|e| Error::invalid_job(format!("{what} cannot be serialized as JSON: {e}")))
}

/// One step of the path to a value: a field or map key, or an index.
#[derive(Debug, Clone)]
enum Step {
    Key(String),
    Index(usize),
}

/// `a.b[2].c`.
fn render(path: &[Step]) -> String {
    let mut out = String::new();
    for step in path {
        match step {
            Step::Key(key) if out.is_empty() => out.push_str(key),
            Step::Key(key) => {
                out.push('.');
                out.push_str(key);
            }
            Step::Index(i) => out.push_str(&format!("[{i}]")),
        }
    }
    out
}

#[derive(Debug)]
enum WalkError {
    NonFinite { path: String, value: f64 },
    Other(String),
}

impl fmt::Display for WalkError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            WalkError::NonFinite { path, value } => write!(f, "{path} is {value}"),
            WalkError::Other(message) => f.write_str(message),
        }
    }
}

impl std::error::Error for WalkError {}

impl ser::Error for WalkError {
    fn custom<T: fmt::Display>(msg: T) -> Self {
        WalkError::Other(msg.to_string())
    }
}

/// A serializer that only looks: it fails on a non-finite float, with the path to it.
struct Walk<'a> {
    path: &'a mut Vec<Step>,
}

impl<'a> Walk<'a> {
    fn float(self, value: f64) -> std::result::Result<(), WalkError> {
        if value.is_finite() {
            Ok(())
        } else {
            Err(WalkError::NonFinite {
                path: render(self.path),
                value,
            })
        }
    }

    /// Walks `value` one step further down the path.
    fn nested<T: Serialize + ?Sized>(
        &mut self,
        step: Step,
        value: &T,
    ) -> std::result::Result<(), WalkError> {
        self.path.push(step);
        let result = value.serialize(Walk {
            path: &mut *self.path,
        });
        self.path.pop();
        result
    }

    fn compound(self, variant: Option<&'static str>) -> Compound<'a> {
        let prefixed = variant.is_some();
        if let Some(variant) = variant {
            self.path.push(Step::Key(variant.to_string()));
        }
        Compound {
            walk: self,
            next: 0,
            key: None,
            prefixed,
        }
    }
}

/// A sequence, map or struct being walked: its next index, the key of the map value that
/// comes next, and whether an enum variant's name was pushed (popped at the end).
struct Compound<'a> {
    walk: Walk<'a>,
    next: usize,
    key: Option<String>,
    prefixed: bool,
}

impl Compound<'_> {
    fn element<T: Serialize + ?Sized>(&mut self, value: &T) -> std::result::Result<(), WalkError> {
        let index = self.next;
        self.next += 1;
        self.walk.nested(Step::Index(index), value)
    }

    fn field<T: Serialize + ?Sized>(
        &mut self,
        key: &str,
        value: &T,
    ) -> std::result::Result<(), WalkError> {
        self.walk.nested(Step::Key(key.to_string()), value)
    }

    fn finish(self) -> std::result::Result<(), WalkError> {
        if self.prefixed {
            self.walk.path.pop();
        }
        Ok(())
    }
}

type Done = std::result::Result<(), WalkError>;

impl<'a> ser::Serializer for Walk<'a> {
    type Ok = ();
    type Error = WalkError;
    type SerializeSeq = Compound<'a>;
    type SerializeTuple = Compound<'a>;
    type SerializeTupleStruct = Compound<'a>;
    type SerializeTupleVariant = Compound<'a>;
    type SerializeMap = Compound<'a>;
    type SerializeStruct = Compound<'a>;
    type SerializeStructVariant = Compound<'a>;

    fn serialize_f32(self, v: f32) -> Done {
        self.float(f64::from(v))
    }
    fn serialize_f64(self, v: f64) -> Done {
        self.float(v)
    }
    fn serialize_bool(self, _: bool) -> Done {
        Ok(())
    }
    fn serialize_i8(self, _: i8) -> Done {
        Ok(())
    }
    fn serialize_i16(self, _: i16) -> Done {
        Ok(())
    }
    fn serialize_i32(self, _: i32) -> Done {
        Ok(())
    }
    fn serialize_i64(self, _: i64) -> Done {
        Ok(())
    }
    fn serialize_i128(self, _: i128) -> Done {
        Ok(())
    }
    fn serialize_u8(self, _: u8) -> Done {
        Ok(())
    }
    fn serialize_u16(self, _: u16) -> Done {
        Ok(())
    }
    fn serialize_u32(self, _: u32) -> Done {
        Ok(())
    }
    fn serialize_u64(self, _: u64) -> Done {
        Ok(())
    }
    fn serialize_u128(self, _: u128) -> Done {
        Ok(())
    }
    fn serialize_char(self, _: char) -> Done {
        Ok(())
    }
    fn serialize_str(self, _: &str) -> Done {
        Ok(())
    }
    fn serialize_bytes(self, _: &[u8]) -> Done {
        Ok(())
    }
    fn serialize_none(self) -> Done {
        Ok(())
    }
    fn serialize_some<T: Serialize + ?Sized>(self, value: &T) -> Done {
        value.serialize(self)
    }
    fn serialize_unit(self) -> Done {
        Ok(())
    }
    fn serialize_unit_struct(self, _: &'static str) -> Done {
        Ok(())
    }
    fn serialize_unit_variant(self, _: &'static str, _: u32, _: &'static str) -> Done {
        Ok(())
    }
    fn serialize_newtype_struct<T: Serialize + ?Sized>(self, _: &'static str, value: &T) -> Done {
        value.serialize(self)
    }
    fn serialize_newtype_variant<T: Serialize + ?Sized>(
        mut self,
        _: &'static str,
        _: u32,
        variant: &'static str,
        value: &T,
    ) -> Done {
        // serde_json writes it as {"Variant": value}.
        self.nested(Step::Key(variant.to_string()), value)
    }
    fn serialize_seq(self, _: Option<usize>) -> std::result::Result<Compound<'a>, WalkError> {
        Ok(self.compound(None))
    }
    fn serialize_tuple(self, _: usize) -> std::result::Result<Compound<'a>, WalkError> {
        Ok(self.compound(None))
    }
    fn serialize_tuple_struct(
        self,
        _: &'static str,
        _: usize,
    ) -> std::result::Result<Compound<'a>, WalkError> {
        Ok(self.compound(None))
    }
    fn serialize_tuple_variant(
        self,
        _: &'static str,
        _: u32,
        variant: &'static str,
        _: usize,
    ) -> std::result::Result<Compound<'a>, WalkError> {
        Ok(self.compound(Some(variant)))
    }
    fn serialize_map(self, _: Option<usize>) -> std::result::Result<Compound<'a>, WalkError> {
        Ok(self.compound(None))
    }
    fn serialize_struct(
        self,
        _: &'static str,
        _: usize,
    ) -> std::result::Result<Compound<'a>, WalkError> {
        Ok(self.compound(None))
    }
    fn serialize_struct_variant(
        self,
        _: &'static str,
        _: u32,
        variant: &'static str,
        _: usize,
    ) -> std::result::Result<Compound<'a>, WalkError> {
        Ok(self.compound(Some(variant)))
    }
}

impl ser::SerializeSeq for Compound<'_> {
    type Ok = ();
    type Error = WalkError;
    fn serialize_element<T: Serialize + ?Sized>(&mut self, value: &T) -> Done {
        self.element(value)
    }
    fn end(self) -> Done {
        self.finish()
    }
}

impl ser::SerializeTuple for Compound<'_> {
    type Ok = ();
    type Error = WalkError;
    fn serialize_element<T: Serialize + ?Sized>(&mut self, value: &T) -> Done {
        self.element(value)
    }
    fn end(self) -> Done {
        self.finish()
    }
}

impl ser::SerializeTupleStruct for Compound<'_> {
    type Ok = ();
    type Error = WalkError;
    fn serialize_field<T: Serialize + ?Sized>(&mut self, value: &T) -> Done {
        self.element(value)
    }
    fn end(self) -> Done {
        self.finish()
    }
}

impl ser::SerializeTupleVariant for Compound<'_> {
    type Ok = ();
    type Error = WalkError;
    fn serialize_field<T: Serialize + ?Sized>(&mut self, value: &T) -> Done {
        self.element(value)
    }
    fn end(self) -> Done {
        self.finish()
    }
}

impl ser::SerializeMap for Compound<'_> {
    type Ok = ();
    type Error = WalkError;
    fn serialize_key<T: Serialize + ?Sized>(&mut self, key: &T) -> Done {
        // A key that is not text (serde_json refuses most of those itself) shows as `?`.
        self.key = Some(
            serde_json::to_value(key)
                .map(|k| match k {
                    Value::String(s) => s,
                    other => other.to_string(),
                })
                .unwrap_or_else(|_| "?".to_string()),
        );
        Ok(())
    }
    fn serialize_value<T: Serialize + ?Sized>(&mut self, value: &T) -> Done {
        let key = self.key.take().unwrap_or_else(|| "?".to_string());
        self.field(&key, value)
    }
    fn end(self) -> Done {
        self.finish()
    }
}

impl ser::SerializeStruct for Compound<'_> {
    type Ok = ();
    type Error = WalkError;
    fn serialize_field<T: Serialize + ?Sized>(&mut self, key: &'static str, value: &T) -> Done {
        self.field(key, value)
    }
    fn end(self) -> Done {
        self.finish()
    }
}

impl ser::SerializeStructVariant for Compound<'_> {
    type Ok = ();
    type Error = WalkError;
    fn serialize_field<T: Serialize + ?Sized>(&mut self, key: &'static str, value: &T) -> Done {
        self.field(key, value)
    }
    fn end(self) -> Done {
        self.finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ErrorKind;
    use serde::Serialize;
    use serde_json::json;
    use std::collections::BTreeMap;

    #[derive(Serialize)]
    struct Point {
        x: f64,
        y: f32,
    }

    #[derive(Serialize)]
    enum Shape {
        Circle(f64),
        Line(Point, Point),
        Box { corner: Point, side: f64 },
    }

    #[derive(Serialize)]
    struct Payload {
        name: &'static str,
        ratio: f64,
        points: Vec<Point>,
        by_day: BTreeMap<String, Option<f64>>,
        shapes: Vec<Shape>,
        pair: (u8, f64),
        #[serde(flatten)]
        extra: BTreeMap<String, f64>,
    }

    fn payload() -> Payload {
        Payload {
            name: "ok",
            ratio: 0.5,
            points: vec![Point { x: 1.0, y: 2.0 }, Point { x: -0.0, y: 1e30 }],
            by_day: BTreeMap::from([("mon".to_string(), Some(1.5)), ("tue".to_string(), None)]),
            shapes: vec![
                Shape::Circle(1.0),
                Shape::Line(Point { x: 0.0, y: 0.0 }, Point { x: 1.0, y: 1.0 }),
                Shape::Box {
                    corner: Point { x: 2.0, y: 2.0 },
                    side: 3.0,
                },
            ],
            pair: (1, f64::MAX),
            extra: BTreeMap::from([("bonus".to_string(), f64::MIN_POSITIVE)]),
        }
    }

    fn refusal(value: &impl Serialize) -> String {
        match to_json_value(value, "payload") {
            Ok(v) => panic!("accepted as {v}"),
            Err(e) => {
                assert_eq!(e.kind(), ErrorKind::InvalidJob, "{e}");
                e.to_string()
            }
        }
    }

    #[test]
    fn finite_values_serialize_as_serde_json_does() {
        let p = payload();
        let value = to_json_value(&p, "payload").expect("all finite");
        assert_eq!(value, serde_json::to_value(&p).expect("serde_json"));
        assert_eq!(value["by_day"], json!({"mon": 1.5, "tue": null}));
        assert_eq!(value["bonus"], json!(f64::MIN_POSITIVE));
    }

    #[test]
    fn non_finite_floats_are_refused_with_their_path() {
        const TAIL: &str = "; JSON has no NaN or Infinity";
        let mut p = payload();
        p.ratio = f64::NAN;
        assert_eq!(refusal(&p), format!("payload field `ratio` is NaN{TAIL}"));

        let mut p = payload();
        p.points[1].y = f32::INFINITY;
        assert_eq!(
            refusal(&p),
            format!("payload field `points[1].y` is Infinity{TAIL}")
        );

        let mut p = payload();
        p.by_day.insert("wed".into(), Some(f64::NEG_INFINITY));
        assert_eq!(
            refusal(&p),
            format!("payload field `by_day.wed` is -Infinity{TAIL}")
        );

        for (shape, path) in [
            (Shape::Circle(f64::NAN), "shapes[3].Circle"),
            (
                Shape::Line(
                    Point { x: 0.0, y: 0.0 },
                    Point {
                        x: f64::NAN,
                        y: 0.0,
                    },
                ),
                "shapes[3].Line[1].x",
            ),
            (
                Shape::Box {
                    corner: Point { x: 0.0, y: 0.0 },
                    side: f64::NAN,
                },
                "shapes[3].Box.side",
            ),
        ] {
            let mut p = payload();
            p.shapes.push(shape);
            assert_eq!(refusal(&p), format!("payload field `{path}` is NaN{TAIL}"));
        }

        let mut p = payload();
        p.pair.1 = f64::NAN;
        assert_eq!(refusal(&p), format!("payload field `pair[1]` is NaN{TAIL}"));

        let mut p = payload();
        p.extra.insert("malus".into(), f64::NAN);
        assert_eq!(refusal(&p), format!("payload field `malus` is NaN{TAIL}"));

        assert_eq!(refusal(&f64::NAN), format!("payload is NaN{TAIL}"));
        assert_eq!(
            refusal(&vec![1.0, f64::INFINITY]),
            format!("payload field `[1]` is Infinity{TAIL}")
        );
        let numbered = BTreeMap::from([(7, f64::NAN)]);
        assert_eq!(
            refusal(&numbered),
            format!("payload field `7` is NaN{TAIL}")
        );
    }

    #[test]
    fn other_failures_are_serde_jsons_to_report() {
        let map = BTreeMap::from([(vec![1], 1.0)]);
        let msg = refusal(&map);
        assert!(
            msg.starts_with("payload cannot be serialized as JSON: "),
            "{msg}"
        );
    }
}
