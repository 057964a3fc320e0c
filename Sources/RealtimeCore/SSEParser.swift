#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#elseif canImport(Darwin)
import Darwin
#endif
public import NIOCore

/// The WHATWG "interpreting an event stream" algorithm, incremental over byte chunks.
///
/// Feed chunks as they arrive with ``parse(_:_:)``; each complete event, `retry` value and (if
/// asked for) comment is handed to the closure in stream order. Chunks may split anywhere: inside a
/// UTF-8 sequence, between CR and LF, inside the BOM. Work is linear in the input: line ends are
/// found with `memchr`, each byte is scanned once, and a line longer than a chunk is collected
/// without rescanning. Invalid UTF-8 becomes U+FFFD. An event (or line) larger than
/// ``Configuration/maxEventSize`` fails with ``RealtimeError/Code/messageTooLarge``.
public struct SSEParser: Sendable {
    /// The parser's limits and options.
    public struct Configuration: Sendable {
        /// The largest event (its data plus the line being read) the parser holds. Default 8 MiB.
        public var maxEventSize: Int
        /// Hand comment lines (`: text`) to the closure as ``Output/comment(_:)``.
        public var emitsComments: Bool
        /// The type of an event without an `event:` field (or with an empty one): `message`, as
        /// WHATWG says. The IKEventSource module sets it to "" to tell an explicit `event: message`
        /// from no name, which its listeners treat differently.
        package var unnamedEventType = "message"

        /// Makes a configuration; every parameter is the property of the same name.
        public init(maxEventSize: Int = 8 << 20, emitsComments: Bool = false) {
            self.maxEventSize = maxEventSize
            self.emitsComments = emitsComments
        }
    }

    /// What the parser produces, in stream order.
    public enum Output: Sendable, Equatable {
        /// A complete event, dispatched.
        case event(ServerSentEvent)
        /// A valid `retry:` field: the new reconnection time in milliseconds.
        case retry(Int)
        /// A comment line's text after the colon (one leading space removed).
        case comment(String)
    }

    /// The limits and options the parser was made with.
    public let configuration: Configuration
    /// The last event ID as of the latest dispatch.
    public private(set) var lastEventId: String
    /// The reconnection time set by the stream, if any (milliseconds).
    public private(set) var reconnectionTime: Int?

    private var pendingLine: [UInt8] = []
    private var data: [UInt8] = []
    private var eventType: [UInt8] = []
    private var idBuffer: [UInt8] = []
    private var idBufferChanged = false
    private var sawFirstLine = false
    private var skipLeadingLF = false

    /// Makes a parser.
    /// - Parameters:
    ///   - configuration: limits and options.
    ///   - lastEventId: the last event ID to start from (a resumed stream's).
    public init(configuration: Configuration = .init(), lastEventId: String = "") {
        self.configuration = configuration
        self.lastEventId = lastEventId
        self.idBuffer = Array(lastEventId.utf8)
    }

    /// Buffers grow with the events they hold; one that grew past this for a large event or line
    /// is released once that event is dispatched, so a stream that once carried a large event
    /// does not keep its size while it is idle.
    package static let retainedCapacity = 4096

    /// The bytes the parser's buffers hold on to (their capacity), for tests of the rule above.
    package var bufferCapacity: Int {
        pendingLine.capacity + data.capacity + eventType.capacity + idBuffer.capacity
    }

    /// Parses one chunk.
    public mutating func parse(_ buffer: ByteBuffer, _ emit: (Output) throws -> Void) throws {
        try buffer.withUnsafeReadableBytes { try parse(bytes: $0, emit) }
    }

    /// Parses one chunk.
    public mutating func parse(bytes chunk: UnsafeRawBufferPointer, _ emit: (Output) throws -> Void) throws {
        guard let base = chunk.baseAddress, chunk.count > 0 else { return }
        let end = chunk.count
        var start = 0
        if skipLeadingLF {
            skipLeadingLF = false
            if base.load(as: UInt8.self) == 0x0A { start = 1 }
        }
        // Cached positions of the next LF and CR at or after `start` (`end` when there is none).
        var nextLF = -1
        var nextCR = -1
        while start < end {
            if nextLF < start { nextLF = Self.find(0x0A, base, from: start, to: end) }
            if nextCR < start { nextCR = Self.find(0x0D, base, from: start, to: end) }
            let lineEnd = min(nextLF, nextCR)
            if lineEnd == end {
                try appendPending(UnsafeRawBufferPointer(start: base + start, count: end - start))
                return
            }
            var next = lineEnd + 1
            if lineEnd == nextCR {
                if next < end {
                    if base.load(fromByteOffset: next, as: UInt8.self) == 0x0A { next += 1 }
                } else {
                    skipLeadingLF = true
                }
            }
            let piece = UnsafeRawBufferPointer(start: base + start, count: lineEnd - start)
            if pendingLine.isEmpty {
                try processLine(piece, emit)
            } else {
                try appendPending(piece)
                let line = pendingLine
                pendingLine.removeAll(keepingCapacity: pendingLine.capacity <= Self.retainedCapacity)
                try line.withUnsafeBytes { try processLine($0, emit) }
            }
            start = next
        }
    }

    /// Ends the stream: a partial line and an undispatched event are discarded, as the standard
    /// says. The last event ID and reconnection time are kept for the next connection.
    public mutating func finish() {
        pendingLine.removeAll(keepingCapacity: pendingLine.capacity <= Self.retainedCapacity)
        data.removeAll(keepingCapacity: data.capacity <= Self.retainedCapacity)
        eventType.removeAll(keepingCapacity: eventType.capacity <= Self.retainedCapacity)
        skipLeadingLF = false
        sawFirstLine = false
        idBuffer = Array(lastEventId.utf8)
        idBufferChanged = false
    }

    @inline(__always)
    private static func find(_ byte: UInt8, _ base: UnsafeRawPointer, from: Int, to: Int) -> Int {
        firstIndex(of: byte, in: UnsafeRawBufferPointer(start: base, count: to), from: from) ?? to
    }

    private mutating func appendPending(_ bytes: UnsafeRawBufferPointer) throws {
        guard pendingLine.count + bytes.count + data.count <= configuration.maxEventSize else {
            throw RealtimeError(.messageTooLarge, "an event exceeds maxEventSize (\(configuration.maxEventSize) bytes); raise EventSourceConfiguration.maxEventSize to accept it")
        }
        pendingLine.append(contentsOf: bytes)
    }

    @inline(__always)
    private mutating func processLine(_ rawLine: UnsafeRawBufferPointer, _ emit: (Output) throws -> Void) throws {
        // The same limit as a line collected across chunks (appendPending), so that whether a
        // stream fails does not depend on where the network cut it.
        guard rawLine.count + data.count <= configuration.maxEventSize else {
            throw RealtimeError(.messageTooLarge, "an event exceeds maxEventSize (\(configuration.maxEventSize) bytes); raise EventSourceConfiguration.maxEventSize to accept it")
        }
        var line = rawLine
        if !sawFirstLine {
            sawFirstLine = true
            if line.count >= 3, line[0] == 0xEF, line[1] == 0xBB, line[2] == 0xBF {
                line = UnsafeRawBufferPointer(rebasing: line[3...])
            }
        }
        let count = line.count
        if count == 0 {
            try dispatch(emit)
            return
        }
        let first = line[0]
        if first == UInt8(ascii: ":") {
            if configuration.emitsComments {
                var text = UnsafeRawBufferPointer(rebasing: line[1...])
                if text.first == UInt8(ascii: " ") { text = UnsafeRawBufferPointer(rebasing: text[1...]) }
                try emit(.comment(String(decoding: text, as: UTF8.self)))
            }
            return
        }
        let colon = Self.find(UInt8(ascii: ":"), line.baseAddress!, from: 0, to: count)
        var valueStart = colon + 1
        if valueStart < count, line[valueStart] == UInt8(ascii: " ") { valueStart += 1 }
        let value = UnsafeRawBufferPointer(rebasing: line[min(valueStart, count)...])
        let name = UnsafeRawBufferPointer(rebasing: line[..<colon])
        switch name.count {
        case 4 where Self.equals(name, "data"):
            guard data.count + value.count + 1 <= configuration.maxEventSize else {
                throw RealtimeError(.messageTooLarge, "an event exceeds maxEventSize (\(configuration.maxEventSize) bytes); raise EventSourceConfiguration.maxEventSize to accept it")
            }
            data.append(contentsOf: value)
            data.append(0x0A)
        case 5 where Self.equals(name, "event"):
            eventType.removeAll(keepingCapacity: true)
            eventType.append(contentsOf: value)
        case 2 where Self.equals(name, "id"):
            if Self.find(0, value.baseAddress ?? name.baseAddress!, from: 0, to: value.count) == value.count {
                if !idBufferChanged && idBuffer.elementsEqual(value) { break }
                idBuffer.removeAll(keepingCapacity: idBuffer.capacity <= Self.retainedCapacity)
                idBuffer.append(contentsOf: value)
                idBufferChanged = true
            }
        case 5 where Self.equals(name, "retry"):
            guard !value.isEmpty else { break }
            var milliseconds = 0
            for byte in value {
                guard byte >= UInt8(ascii: "0"), byte <= UInt8(ascii: "9") else { return }
                let (times10, overflow1) = milliseconds.multipliedReportingOverflow(by: 10)
                let (sum, overflow2) = times10.addingReportingOverflow(Int(byte &- UInt8(ascii: "0")))
                milliseconds = overflow1 || overflow2 ? Int.max : sum
            }
            reconnectionTime = milliseconds
            try emit(.retry(milliseconds))
        default:
            break
        }
    }

    @inline(__always)
    private static func equals(_ bytes: UnsafeRawBufferPointer, _ literal: StaticString) -> Bool {
        memcmp(bytes.baseAddress!, literal.utf8Start, literal.utf8CodeUnitCount) == 0
    }

    @inline(__always)
    private mutating func dispatch(_ emit: (Output) throws -> Void) throws {
        if idBufferChanged {
            lastEventId = String(decoding: idBuffer, as: UTF8.self)
            idBufferChanged = false
        }
        if data.isEmpty {
            eventType.removeAll(keepingCapacity: true)
            return
        }
        let text = data.withUnsafeBufferPointer { String(decoding: UnsafeBufferPointer(rebasing: $0.dropLast()), as: UTF8.self) }
        let type = eventType.isEmpty ? configuration.unnamedEventType : String(decoding: eventType, as: UTF8.self)
        data.removeAll(keepingCapacity: data.capacity <= Self.retainedCapacity)
        eventType.removeAll(keepingCapacity: eventType.capacity <= Self.retainedCapacity)
        try emit(.event(ServerSentEvent(type: type, data: text, lastEventId: lastEventId)))
    }
}
