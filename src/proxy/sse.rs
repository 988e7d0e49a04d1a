//! Usage events read from a `text/event-stream` as it passes (SPEC §20): an event named
//! `usage` whose data is `{"units": N}`, N the call's units so far.
//!
//! The scanner follows the event-stream format of the HTML standard (lines end in
//! CRLF, LF or CR; `field: value`, one space after the colon dropped; `data` lines
//! joined with LF; a blank line dispatches the event) over chunks cut anywhere. It
//! never holds a chunk: it keeps at most one partial line and the data of the event
//! being read, each bounded, so a stream's memory does not grow with its length. A line
//! longer than [`MAX_LINE`] is skipped whole (its event cannot be a usage event).

/// Longest line the scanner reads; longer ones are skipped.
pub const MAX_LINE: usize = 4096;
/// Largest data of a usage event.
const MAX_DATA: usize = 1024;
/// Largest cumulative figure a usage event may report.
pub const MAX_UNITS: i64 = 1_000_000_000_000;

/// A usage event: where in the chunk it was dispatched (the offset just past its
/// blank line) and the units it reports.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct UsageEvent {
    pub end: usize,
    pub units: i64,
}

#[derive(Debug, Default)]
pub struct UsageScanner {
    /// The start of a line the last chunk cut.
    line: Vec<u8>,
    /// The current line is past [`MAX_LINE`]: skipped to its end.
    skipping: bool,
    /// The last chunk ended in CR: an LF opening this one ends no line.
    after_cr: bool,
    /// The event being read is named `usage`.
    usage: bool,
    /// Its data lines, joined; `None` once past [`MAX_DATA`].
    data: Option<Vec<u8>>,
    /// Events that carried data not understood, for the caller's warning.
    pub unreadable: u64,
}

impl UsageScanner {
    pub fn new() -> Self {
        Self {
            data: Some(Vec::new()),
            ..Self::default()
        }
    }

    /// Reads `chunk`, calling `found` for each usage event dispatched in it, in order.
    pub fn scan(&mut self, chunk: &[u8], mut found: impl FnMut(UsageEvent)) {
        let mut start = 0;
        if self.after_cr && chunk.first() == Some(&b'\n') {
            start = 1;
        }
        self.after_cr = false;
        while start < chunk.len() {
            let Some(at) = memchr::memchr2(b'\n', b'\r', &chunk[start..]) else {
                self.keep_partial(&chunk[start..]);
                return;
            };
            let end_of_line = start + at;
            let mut next = end_of_line + 1;
            if chunk[end_of_line] == b'\r' {
                match chunk.get(next) {
                    Some(b'\n') => next += 1,
                    Some(_) => {}
                    None => self.after_cr = true,
                }
            }
            let piece = &chunk[start..end_of_line];
            if self.line.is_empty() && !self.skipping {
                self.line_ended(piece, next, &mut found);
            } else {
                self.keep_partial(piece);
                let line = std::mem::take(&mut self.line);
                if !std::mem::take(&mut self.skipping) {
                    self.line_ended(&line, next, &mut found);
                }
                self.line = line;
                self.line.clear();
            }
            start = next;
        }
    }

    fn keep_partial(&mut self, piece: &[u8]) {
        if self.skipping {
            return;
        }
        if self.line.len() + piece.len() > MAX_LINE {
            self.line.clear();
            self.skipping = true;
        } else {
            self.line.extend_from_slice(piece);
        }
    }

    fn line_ended(&mut self, line: &[u8], end: usize, found: &mut impl FnMut(UsageEvent)) {
        if line.is_empty() {
            self.dispatch(end, found);
            return;
        }
        let (field, value) = match memchr::memchr(b':', line) {
            Some(colon) => {
                let value = &line[colon + 1..];
                (&line[..colon], value.strip_prefix(b" ").unwrap_or(value))
            }
            None => (line, &[][..]),
        };
        match field {
            b"event" => self.usage = value == b"usage",
            b"data" => {
                if let Some(data) = self.data.as_mut() {
                    if data.len() + value.len() + 1 > MAX_DATA {
                        self.data = None;
                    } else {
                        if !data.is_empty() {
                            data.push(b'\n');
                        }
                        data.extend_from_slice(value);
                    }
                }
            }
            _ => {}
        }
    }

    fn dispatch(&mut self, end: usize, found: &mut impl FnMut(UsageEvent)) {
        let usage = std::mem::take(&mut self.usage);
        let data = match self.data.as_mut() {
            Some(data) => data,
            None => {
                self.data = Some(Vec::new());
                self.unreadable += u64::from(usage);
                return;
            }
        };
        if usage {
            match units_of(data) {
                Some(units) => found(UsageEvent { end, units }),
                None => self.unreadable += 1,
            }
        }
        data.clear();
    }
}

/// `N` of `{"units": N}`: a whole number from 0 to [`MAX_UNITS`]; other fields are
/// allowed and ignored.
fn units_of(data: &[u8]) -> Option<i64> {
    #[derive(serde::Deserialize)]
    struct Usage {
        units: serde_json::Number,
    }
    let usage: Usage = serde_json::from_slice(data).ok()?;
    usage.units.as_i64().filter(|n| (0..=MAX_UNITS).contains(n))
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    fn scan_all(chunks: &[&[u8]]) -> Vec<i64> {
        let mut scanner = UsageScanner::new();
        let mut units = Vec::new();
        for chunk in chunks {
            scanner.scan(chunk, |e| units.push(e.units));
        }
        units
    }

    #[test]
    fn usage_events_are_read_and_other_events_pass_by() {
        let stream = b"event: token\ndata: {\"units\": 99}\n\n\
            event: usage\ndata: {\"units\": 3}\n\n\
            data: hello\n\n\
            event:usage\r\ndata:{\"units\":7,\"model\":\"x\"}\r\n\r\n\
            : a comment\n\
            event: usage\rdata: {\"units\": 9}\r\r";
        assert_eq!(scan_all(&[stream]), vec![3, 7, 9]);
    }

    #[test]
    fn the_dispatch_offset_is_just_past_the_blank_line() {
        let chunk = b"event: usage\ndata: {\"units\": 2}\n\nevent: token\ndata: x\n\n";
        let mut scanner = UsageScanner::new();
        let mut ends = Vec::new();
        scanner.scan(chunk, |e| ends.push(e.end));
        assert_eq!(ends, vec![33]);
        assert_eq!(&chunk[..33], b"event: usage\ndata: {\"units\": 2}\n\n");
    }

    #[test]
    fn bad_figures_are_not_usage() {
        let stream = b"event: usage\ndata: {\"units\": -1}\n\n\
            event: usage\ndata: {\"units\": 2.5}\n\n\
            event: usage\ndata: units=4\n\n\
            event: usage\ndata: {\"units\": 1000000000001}\n\n\
            event: usage\n\n";
        let mut scanner = UsageScanner::new();
        let mut units = Vec::new();
        scanner.scan(stream, |e| units.push(e.units));
        assert!(units.is_empty());
        assert_eq!(scanner.unreadable, 5);
    }

    #[test]
    fn a_line_past_the_bound_is_skipped_and_memory_stays_bounded() {
        let mut scanner = UsageScanner::new();
        let mut units = Vec::new();
        scanner.scan(b"event: usage\ndata: ", |e| units.push(e.units));
        for _ in 0..100 {
            scanner.scan(&[b'x'; 1000], |e| units.push(e.units));
            assert!(scanner.line.len() <= MAX_LINE);
        }
        scanner.scan(b"\n\nevent: usage\ndata: {\"units\": 5}\n\n", |e| {
            units.push(e.units)
        });
        assert_eq!(units, vec![5]);
    }

    proptest! {
        /// Wherever the chunks are cut, the same events are read.
        #[test]
        fn cuts_do_not_change_what_is_read(cuts in proptest::collection::vec(0usize..120, 0..8)) {
            let stream: &[u8] = b"event: usage\r\ndata: {\"units\": 1}\r\n\r\n\
                event: token\ndata: abc\n\n\
                event: usage\rdata: {\"units\":\r\r\
                event: usage\ndata: {\"units\": 4}\n\n";
            let mut cuts: Vec<usize> = cuts.into_iter().map(|c| c.min(stream.len())).collect();
            cuts.sort_unstable();
            let mut chunks = Vec::new();
            let mut from = 0;
            for cut in cuts {
                chunks.push(&stream[from..cut]);
                from = cut;
            }
            chunks.push(&stream[from..]);
            prop_assert_eq!(scan_all(&chunks), vec![1, 4]);
        }
    }
}
