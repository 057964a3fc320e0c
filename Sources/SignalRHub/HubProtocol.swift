import Foundation
import RealtimeCore

/// The hub protocol a connection speaks: `json` (text, messages end with 0x1E) or `messagePack`
/// (binary, each message prefixed with its VarInt length). The handshake is JSON for both. The
/// raw values are the protocols' names in the handshake and negotiate.
public enum HubProtocolType: String, Sendable, Hashable, CaseIterable {
    /// The JSON hub protocol (text frames, records ending with 0x1E).
    case json
    /// The MessagePack hub protocol (binary frames, length-prefixed).
    case messagePack = "messagepack"

    /// Text for JSON, binary for MessagePack (which therefore cannot run over Server-Sent Events).
    public var transferFormat: TransferFormat { self == .json ? .text : .binary }
}

/// The transfer format a transport must carry.
public enum TransferFormat: String, Sendable, Hashable {
    /// Text frames.
    case text = "Text"
    /// Binary frames.
    case binary = "Binary"
}

/// Encodes and decodes hub messages for one hub protocol, and splits the byte stream into messages.
public struct HubProtocolCodec: Sendable {
    /// The protocol: JSON or MessagePack.
    public let kind: HubProtocolType
    /// The largest message accepted from the server, in bytes (the framer refuses a longer one
    /// before buffering it).
    public var maximumMessageSize: Int

    /// Makes a codec for `kind` that refuses messages over `maximumMessageSize` bytes.
    public init(_ kind: HubProtocolType, maximumMessageSize: Int = 32 << 20) {
        self.kind = kind
        self.maximumMessageSize = maximumMessageSize
    }

    /// Appends the framed encoding of `message` to `out`.
    public func write(_ message: HubMessage, into out: inout [UInt8]) {
        switch kind {
        case .json: JSONHubProtocol.write(message, into: &out)
        case .messagePack: MessagePackHubProtocol.write(message, into: &out)
        }
    }

    /// The framed encoding of `message`.
    public func encode(_ message: HubMessage) -> [UInt8] {
        var out: [UInt8] = []
        // An invocation of a short method with a small argument takes about 70 bytes in JSON.
        out.reserveCapacity(128)
        write(message, into: &out)
        return out
    }

    /// Decodes one unframed message body.
    public func decode(body: UnsafeRawBufferPointer) throws(HubProtocolError) -> HubMessage {
        switch kind {
        case .json: try JSONHubProtocol.parse(body)
        case .messagePack: try MessagePackHubProtocol.parse(body)
        }
    }
}

// MARK: - Framing

/// Splits a byte stream into framed messages, keeping an incomplete tail for the next call. One
/// per connection; JSON frames end with 0x1E, MessagePack frames start with a VarInt length.
public struct HubMessageFramer: Sendable {
    /// The protocol whose framing is used.
    public let kind: HubProtocolType
    /// The longest message accepted, in bytes.
    public let maximumMessageSize: Int
    private var pending: [UInt8] = []
    /// How many bytes at the front of `pending` are known to hold no record separator (JSON): a
    /// message arriving in many pieces is searched once, not once per piece.
    private var searched = 0

    /// Makes a framer for `kind` that refuses messages over `maximumMessageSize` bytes.
    public init(_ kind: HubProtocolType, maximumMessageSize: Int = 32 << 20) {
        self.kind = kind
        self.maximumMessageSize = maximumMessageSize
    }

    /// Bytes held back waiting for the rest of a message.
    public var bufferedByteCount: Int { pending.count }
    /// The storage held for that, in bytes (at most 4 KiB between messages).
    package var retainedCapacity: Int { pending.capacity }

    /// Appends `bytes` and calls `body` with each complete message body, in order.
    public mutating func consume(
        _ bytes: some Collection<UInt8>, _ body: (UnsafeRawBufferPointer) throws(HubProtocolError) -> Void
    ) throws(HubProtocolError) {
        pending.append(contentsOf: bytes)
        let kind = kind
        let limit = maximumMessageSize
        let searched = searched
        let result: Result<Int, HubProtocolError> = pending.withUnsafeBytes { raw in
            do throws(HubProtocolError) {
                return .success(try Self.split(raw, kind: kind, limit: limit, searched: searched, body))
            } catch {
                return .failure(error)
            }
        }
        switch result {
        case .success(let consumed):
            // Storage a large message grew is released once the message is out (an idle
            // connection keeps at most 4 KiB here).
            if consumed == pending.count { pending.removeAll(keepingCapacity: pending.capacity <= 4096) }
            else if consumed > 0 { pending.removeFirst(consumed) }
            // What is left is an incomplete message, searched to its end.
            self.searched = pending.count
        case .failure(let error):
            pending.removeAll()
            self.searched = 0
            throw error
        }
    }

    /// Splits complete messages off the front of `raw`, whose first `searched` bytes hold no
    /// record separator; returns how many bytes they took.
    static func split(
        _ raw: UnsafeRawBufferPointer, kind: HubProtocolType, limit: Int, searched: Int,
        _ body: (UnsafeRawBufferPointer) throws(HubProtocolError) -> Void
    ) throws(HubProtocolError) -> Int {
        var start = 0
        switch kind {
        case .json:
            var from = min(searched, raw.count)
            while start < raw.count {
                defer { from = start }
                guard let end = firstIndex(of: 0x1E, in: raw, from: from) else {
                    if raw.count - start > limit { throw HubProtocolError("message exceeds the maximum size of \(limit) bytes") }
                    break
                }
                if end - start > limit { throw HubProtocolError("message exceeds the maximum size of \(limit) bytes") }
                try body(UnsafeRawBufferPointer(rebasing: raw[start..<end]))
                start = end + 1
            }
        case .messagePack:
            while start < raw.count {
                guard let (length, headerSize) = try VarInt.read(UnsafeRawBufferPointer(rebasing: raw[start...])) else { break }
                if length > limit { throw HubProtocolError("message of \(length) bytes exceeds the maximum size of \(limit) bytes") }
                let bodyStart = start + headerSize
                guard raw.count - bodyStart >= length else { break }
                try body(UnsafeRawBufferPointer(rebasing: raw[bodyStart..<bodyStart + length]))
                start = bodyStart + length
            }
        }
        return start
    }
}

/// The MessagePack protocol's length prefix: 7 bits per byte, least significant group first, high
/// bit set while more bytes follow, at most 5 bytes, at most 2^31 - 1.
public enum VarInt {
    /// Appends `length`'s encoding to `out`.
    public static func write(_ length: Int, into out: inout [UInt8]) {
        var value = UInt32(length)
        repeat {
            var byte = UInt8(value & 0x7f)
            value >>= 7
            if value > 0 { byte |= 0x80 }
            out.append(byte)
        } while value > 0
    }

    /// The length and the prefix's size, nil when the prefix is not complete yet.
    public static func read(_ raw: UnsafeRawBufferPointer) throws(HubProtocolError) -> (length: Int, size: Int)? {
        var value: UInt64 = 0
        for index in 0..<5 {
            guard index < raw.count else { return nil }
            let byte = raw[index]
            value |= UInt64(byte & 0x7f) << (7 * UInt64(index))
            if byte & 0x80 == 0 {
                guard value <= UInt64(Int32.max) else { throw HubProtocolError("messages over 2GB in size are not supported") }
                return (Int(value), index + 1)
            }
        }
        throw HubProtocolError("messages over 2GB in size are not supported")
    }
}

// MARK: - Handshake

/// The JSON handshake both protocols start with.
public enum HubHandshake {
    /// `{"protocol":"json","version":1}` + 0x1E.
    public static func request(_ kind: HubProtocolType, version: Int = 1) -> [UInt8] {
        Array("{\"protocol\":\"\(kind.rawValue)\",\"version\":\(version)}\u{1E}".utf8)
    }

    /// The outcome of reading the server's handshake response.
    public enum Response: Sendable, Equatable {
        /// More bytes are needed.
        case incomplete
        /// The server accepted (`{}`); `consumed` bytes belong to the handshake, the rest are messages.
        case accepted(consumed: Int)
        /// The server refused with this error text.
        case refused(String, consumed: Int)
    }

    /// Reads the handshake response at the front of `bytes`.
    public static func parseResponse(_ bytes: some Collection<UInt8>) throws(HubProtocolError) -> Response {
        let bytes = Array(bytes)
        guard let end = bytes.firstIndex(of: 0x1E) else { return .incomplete }
        let object = try jsonObject(Array(bytes[..<end]), what: "handshake response")
        // A handshake response has no "type"; a message in its place (a server that sent before
        // its handshake response) is refused, as the reference clients do.
        if object["type"] != nil { throw HubProtocolError("expected a handshake response from the server, got a message with a 'type'") }
        if let error = object["error"] {
            guard case .string(let text) = error else { throw HubProtocolError("expected 'error' to be of type String") }
            return .refused(text, consumed: end + 1)
        }
        return .accepted(consumed: end + 1)
    }

    /// Reads a handshake request (what a server receives): the protocol name and version.
    public static func parseRequest(_ bytes: some Collection<UInt8>) throws(HubProtocolError) -> (protocol: String, version: Int, consumed: Int)? {
        let bytes = Array(bytes)
        guard let end = bytes.firstIndex(of: 0x1E) else { return nil }
        // A request followed by more JSON before the separator: the first object counts (as in .NET).
        let object = try jsonObject(Array(bytes[..<end]), what: "handshake request", allowTrailing: true)
        guard let protocolValue = object["protocol"] else { throw HubProtocolError("missing required property 'protocol'") }
        guard case .string(let name) = protocolValue else { throw HubProtocolError("expected 'protocol' to be of type String") }
        guard let versionValue = object["version"] else { throw HubProtocolError("missing required property 'version'") }
        guard let version = versionValue.intValue else { throw HubProtocolError("expected 'version' to be of type Number") }
        return (name, version, end + 1)
    }

    private static func jsonObject(
        _ bytes: [UInt8], what: String, allowTrailing: Bool = false
    ) throws(HubProtocolError) -> JSONValue {
        var slice = bytes[...]
        if allowTrailing, let first = slice.firstIndex(of: UInt8(ascii: "{")) {
            // Cut at the end of the first top-level object.
            var depth = 0
            var inString = false
            var escaped = false
            var index = first
            while index < slice.endIndex {
                let byte = slice[index]
                if inString {
                    if escaped { escaped = false } else if byte == UInt8(ascii: "\\") { escaped = true } else if byte == UInt8(ascii: "\"") { inString = false }
                } else if byte == UInt8(ascii: "\"") {
                    inString = true
                } else if byte == UInt8(ascii: "{") {
                    depth += 1
                } else if byte == UInt8(ascii: "}") {
                    depth -= 1
                    if depth == 0 {
                        slice = slice[..<(index + 1)]
                        break
                    }
                }
                index += 1
            }
        }
        let value: JSONValue
        do {
            value = try slice.withTypedBytes { raw throws(JSONParseError) in try JSONReader.parse(raw) }
        } catch {
            throw HubProtocolError("invalid \(what): \(error)")
        }
        guard case .object = value else { throw HubProtocolError("invalid \(what): expected a JSON object") }
        return value
    }
}

extension Array where Element == UInt8 {
    func withTypedBytes<R, E: Error>(_ body: (UnsafeRawBufferPointer) throws(E) -> R) throws(E) -> R {
        let result: Result<R, E> = self.withUnsafeBufferPointer { buffer in
            do throws(E) { return .success(try body(UnsafeRawBufferPointer(buffer))) } catch { return .failure(error) }
        }
        return try result.get()
    }
}

extension ArraySlice where Element == UInt8 {
    func withTypedBytes<R, E: Error>(_ body: (UnsafeRawBufferPointer) throws(E) -> R) throws(E) -> R {
        let result: Result<R, E> = self.withUnsafeBufferPointer { buffer in
            do throws(E) { return .success(try body(UnsafeRawBufferPointer(buffer))) } catch { return .failure(error) }
        }
        return try result.get()
    }
}
