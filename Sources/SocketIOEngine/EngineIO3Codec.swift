public import Foundation
import RealtimeCore

/// Engine.IO protocol 3 encoding rules (socket.io 2.x servers; engine.io-parser 2, python-engineio 3):
///
/// - A packet is its type digit and its text, as in revision 4; where only text travels, a binary
///   packet is `b`, its type digit, then base64 (`b4AQID`).
/// - Over a WebSocket a binary packet is a binary frame whose first byte is the packet type (4)
///   followed by the data.
/// - A polling payload is `<length>:<packet>` repeated. The length counts UTF-16 code units in
///   engine.io (JavaScript strings), bytes in python-engineio's writer and characters in its reader.
///   UTF-16 units and characters agree on every character but those beyond the Basic Multilingual
///   Plane (emoji), which take two units and one character: the client writes UTF-8 as the
///   JavaScript client does, with the length in UTF-16 units, but writes those characters inside a
///   packet's JSON as `\uXXXX` surrogate escapes (which mean the same), so every server reads the
///   same lengths (``pollingText(_:)``). It reads any of the three counts.
/// - A server may answer polling in the XHR2 binary framing instead: per packet a `0x00` (text) or
///   `0x01` (binary) byte, the length as one byte per decimal digit, `0xFF`, then the packet's bytes.
public enum EngineIO3Codec {
    /// Encodes one packet. With `supportsBinary` (WebSocket), a binary message becomes a binary
    /// frame of its type byte and data; without it (polling), `b4` + base64.
    public static func encode(_ packet: EngineIOPacket, supportsBinary: Bool) -> EngineIOCodec.Encoded {
        switch packet.payload {
        case .binary(let data):
            if supportsBinary {
                var framed = Data([packet.type.rawValue])
                framed.append(data)
                return .binary(framed)
            }
            return .text("b" + String(UnicodeScalar(packet.type.character)) + data.base64EncodedString())
        case .text, .none:
            return EngineIOCodec.encode(packet, supportsBinary: false)
        }
    }

    /// Decodes one text packet (a WebSocket text frame, or one packet of a polling payload).
    public static func decode(text: String) throws(SocketIOParseError) -> EngineIOPacket {
        try withUTF8Bytes(text) { bytes throws(SocketIOParseError) in try decode(bytes: bytes) }
    }

    /// Decodes one binary WebSocket frame: its first byte is the packet type.
    public static func decode(binary data: Data) throws(SocketIOParseError) -> EngineIOPacket {
        guard let first = data.first else { throw .engineIOParserError("an empty binary packet") }
        guard let type = EngineIOPacketType(rawValue: first) else {
            throw .engineIOParserError("unknown binary packet type \(first)")
        }
        return EngineIOPacket(type, .binary(Data(data.dropFirst())))
    }

    static func decode(bytes: UnsafeRawBufferPointer) throws(SocketIOParseError) -> EngineIOPacket {
        guard let first = bytes.first else { throw .engineIOParserError("empty packet") }
        guard first == UInt8(ascii: "b") else { return try EngineIOCodec.decode(bytes: bytes) }
        guard bytes.count >= 2, bytes[1] >= UInt8(ascii: "0"), let type = EngineIOPacketType(rawValue: bytes[1] - UInt8(ascii: "0")) else {
            throw .engineIOParserError("a base64 packet without a valid type")
        }
        guard let data = Data(base64Encoded: Data(UnsafeRawBufferPointer(rebasing: bytes[2...]))) else {
            throw .engineIOParserError("invalid base64 in a binary packet")
        }
        return EngineIOPacket(type, .binary(data))
    }

    /// Joins packets into one polling payload (`<length>:<packet>` each).
    public static func encodePayload(_ packets: [EngineIOPacket]) -> String {
        var out = ""
        for packet in packets {
            guard case .text(let text) = encode(packet, supportsBinary: false) else { continue }
            appendRecord(pollingText(text), to: &out)
        }
        return out
    }

    /// Appends `<length>:<packet>` for a packet text (its length in UTF-16 units).
    static func appendRecord(_ text: String, to out: inout String) {
        out += String(text.utf16.count)
        out += ":"
        out += text
    }

    /// Splits a polling payload (the text framing, or the XHR2 binary framing) into packets. Any bad
    /// packet fails the whole payload. A text payload is read with the first count of its lengths
    /// (UTF-16 code units, bytes, characters) under which all of it parses.
    public static func decodePayload(_ bytes: UnsafeRawBufferPointer) throws(SocketIOParseError) -> [EngineIOPacket] {
        guard let first = bytes.first else { return [] }
        if first <= 1 { return try decodeBinaryPayload(bytes) }
        guard isValidUTF8(bytes) else { throw .engineIOParserError("the payload is not valid UTF-8") }
        var firstError: SocketIOParseError?
        for counting in [LengthCounting.utf16, .bytes, .characters] {
            do {
                return try decodeTextPayload(bytes, counting: counting)
            } catch {
                firstError = firstError ?? error
            }
            // An ASCII payload reads the same under every count.
            if bytes.allSatisfy({ $0 < 0x80 }) { break }
        }
        throw firstError ?? .engineIOParserError("an invalid payload")
    }

    /// Splits a polling payload into its packets.
    public static func decodePayload(_ text: String) throws(SocketIOParseError) -> [EngineIOPacket] {
        try withUTF8Bytes(text) { bytes throws(SocketIOParseError) in try decodePayload(bytes) }
    }

    /// What a text payload's lengths count.
    private enum LengthCounting {
        /// engine.io (JavaScript string lengths).
        case utf16
        /// python-engineio 3's writer.
        case bytes
        /// python-engineio 3's reader.
        case characters
    }

    private static func decodeTextPayload(_ bytes: UnsafeRawBufferPointer, counting: LengthCounting) throws(SocketIOParseError) -> [EngineIOPacket] {
        var packets: [EngineIOPacket] = []
        var index = 0
        while index < bytes.count {
            var length = 0
            let start = index
            while index < bytes.count, bytes[index] != UInt8(ascii: ":") {
                guard (UInt8(ascii: "0")...UInt8(ascii: "9")).contains(bytes[index]), index - start < 9 else {
                    throw .engineIOParserError("a payload length that is not a number")
                }
                length = length * 10 + Int(bytes[index] - UInt8(ascii: "0"))
                index += 1
            }
            guard index < bytes.count, index > start else { throw .engineIOParserError("a payload length without ':'") }
            index += 1
            let end = try packetEnd(bytes, from: index, length: length, counting: counting)
            packets.append(try decode(bytes: UnsafeRawBufferPointer(rebasing: bytes[index..<end])))
            index = end
        }
        return packets
    }

    /// Where a packet of `length` starting at `start` ends.
    private static func packetEnd(
        _ bytes: UnsafeRawBufferPointer, from start: Int, length: Int, counting: LengthCounting
    ) throws(SocketIOParseError) -> Int {
        var index = start
        var counted = 0
        if counting == .bytes {
            index = start + length
        } else {
            while counted < length, index < bytes.count {
                let byte = bytes[index]
                let width = byte < 0x80 ? 1 : byte < 0xE0 ? 2 : byte < 0xF0 ? 3 : 4
                counted += counting == .utf16 && width == 4 ? 2 : 1
                index += width
            }
            if counted != length { index = -1 }
        }
        guard index >= start, index <= bytes.count else {
            throw .engineIOParserError("a packet length (\(length)) that does not fit the payload")
        }
        return index
    }

    /// The XHR2 binary framing: `0x00` text or `0x01` binary, the length's decimal digits as bytes,
    /// `0xFF`, then the packet.
    private static func decodeBinaryPayload(_ bytes: UnsafeRawBufferPointer) throws(SocketIOParseError) -> [EngineIOPacket] {
        var packets: [EngineIOPacket] = []
        var index = 0
        while index < bytes.count {
            let kind = bytes[index]
            guard kind <= 1 else { throw .engineIOParserError("a binary payload packet of kind \(kind)") }
            index += 1
            var length = 0
            var digits = 0
            while index < bytes.count, bytes[index] != 0xFF {
                guard bytes[index] <= 9, digits < 9 else { throw .engineIOParserError("a binary payload length that is not digits") }
                length = length * 10 + Int(bytes[index])
                digits += 1
                index += 1
            }
            guard index < bytes.count, digits > 0 else { throw .engineIOParserError("a binary payload length without its end") }
            index += 1
            guard length > 0, index + length <= bytes.count else { throw .engineIOParserError("a binary payload packet longer than the payload") }
            let packet = UnsafeRawBufferPointer(rebasing: bytes[index..<(index + length)])
            if kind == 0 {
                guard isValidUTF8(packet) else { throw .engineIOParserError("a text packet that is not valid UTF-8") }
                packets.append(try decode(bytes: packet))
            } else {
                packets.append(try decode(binary: Data(packet)))
            }
            index += length
        }
        return packets
    }

    /// `text` as the client writes it in a polling payload: UTF-8, but the characters beyond the
    /// Basic Multilingual Plane inside its JSON part written as `\uXXXX` surrogate escapes, the
    /// only characters whose length engine.io (UTF-16 units) and python-engineio (characters)
    /// count differently. A namespace's own characters are kept.
    public static func pollingText(_ text: String) -> String {
        if text.utf8.allSatisfy({ $0 < 0xF0 }) { return text }
        return escaped(text) { $0.value > 0xFFFF }
    }

    /// The bytes ``pollingText(_:)`` adds to `text` (8 for each escaped character: 12 bytes of
    /// escapes for its 4 of UTF-8).
    static func pollingTextGrowth(_ text: String) -> Int {
        if text.utf8.allSatisfy({ $0 < 0xF0 }) { return 0 }
        var inJSON = false
        var growth = 0
        for scalar in text.unicodeScalars {
            if !inJSON, scalar == "[" || scalar == "{" || scalar == "\"" { inJSON = true }
            if inJSON, scalar.value > 0xFFFF { growth += 8 }
        }
        return growth
    }

    /// `text` with every non-ASCII character of its JSON part written as `\uXXXX` escapes (JSON
    /// reads them back as the same string): a polling payload's lengths then mean the same to every
    /// Engine.IO 3 server. Non-ASCII can only be inside JSON strings, which start after the packet's
    /// header (type, attachments, namespace, ack id); a namespace's own non-ASCII is kept.
    public static func asciiOnly(_ text: String) -> String {
        if text.utf8.allSatisfy({ $0 < 0x80 }) { return text }
        return escaped(text) { $0.value >= 0x80 }
    }

    /// `text` with the characters of its JSON part that `escape` picks written as `\uXXXX`.
    private static func escaped(_ text: String, _ escape: (Unicode.Scalar) -> Bool) -> String {
        var out = String.UnicodeScalarView()
        var inJSON = false
        let hex = Array("0123456789abcdef".unicodeScalars)
        for scalar in text.unicodeScalars {
            if !inJSON, scalar == "[" || scalar == "{" || scalar == "\"" { inJSON = true }
            guard inJSON, escape(scalar) else {
                out.append(scalar)
                continue
            }
            for unit in String(scalar).utf16 {
                out.append("\\")
                out.append("u")
                for shift in stride(from: 12, through: 0, by: -4) { out.append(hex[Int(unit >> UInt16(shift)) & 0xF]) }
            }
        }
        return String(out)
    }
}
