//! The protobuf wire format: a message body read as a sequence of tagged fields.

use super::Error;

/// One field value as it is on the wire, before the schema says what it means.
#[derive(Debug, Clone, Copy)]
pub(super) enum Wire<'a> {
    /// A varint: integers, booleans.
    Varint(u64),
    /// Eight bytes, little-endian: `double`, `fixed64`.
    Fixed64(u64),
    /// A length-delimited run: strings, bytes, messages, packed repeated scalars.
    Bytes(&'a [u8]),
    /// Four bytes, little-endian: `float`, `fixed32`.
    Fixed32(u32),
}

/// Reads the fields of one message body in wire order.
pub(super) struct Fields<'a> {
    buf: &'a [u8],
}

impl<'a> Fields<'a> {
    /// The fields of `buf`, a whole message body.
    pub(super) fn new(buf: &'a [u8]) -> Fields<'a> {
        Fields { buf }
    }

    fn take(&mut self, n: usize) -> Result<&'a [u8], Error> {
        if self.buf.len() < n {
            return Err(Error::Truncated);
        }
        let (head, rest) = self.buf.split_at(n);
        self.buf = rest;
        Ok(head)
    }

    /// Reads one base-128 varint.
    pub(super) fn varint(&mut self) -> Result<u64, Error> {
        let mut value = 0u64;
        for shift in (0..64).step_by(7) {
            let byte = self.take(1)?[0];
            value |= u64::from(byte & 0x7f) << shift;
            if byte & 0x80 == 0 {
                return Ok(value);
            }
        }
        Err(Error::BadVarint)
    }

    fn field(&mut self) -> Result<(u32, Wire<'a>), Error> {
        let key = self.varint()?;
        let tag = u32::try_from(key >> 3).map_err(|_| Error::BadTag(key))?;
        let value = match key & 7 {
            0 => Wire::Varint(self.varint()?),
            1 => Wire::Fixed64(u64::from_le_bytes(
                self.take(8)?.try_into().map_err(|_| Error::Truncated)?,
            )),
            2 => {
                let len = usize::try_from(self.varint()?).map_err(|_| Error::Truncated)?;
                Wire::Bytes(self.take(len)?)
            }
            5 => Wire::Fixed32(u32::from_le_bytes(
                self.take(4)?.try_into().map_err(|_| Error::Truncated)?,
            )),
            other => return Err(Error::WireType { tag, wire: other }),
        };
        Ok((tag, value))
    }

    /// Whether the body is read to its end.
    pub(super) fn is_empty(&self) -> bool {
        self.buf.is_empty()
    }
}

impl<'a> Iterator for Fields<'a> {
    type Item = Result<(u32, Wire<'a>), Error>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.buf.is_empty() {
            return None;
        }
        let item = self.field();
        if item.is_err() {
            self.buf = &[];
        }
        Some(item)
    }
}
