public import Foundation
import OrderedCollections
public import RealtimeCore

/// Socket.IO v5 packet types.
public enum SocketIOPacketType: UInt8, Sendable, CaseIterable {
    /// The Socket.IO v5 packet types, by their number on the wire.
    case connect = 0, disconnect, event, ack, connectError, binaryEvent, binaryAck
}

/// One Socket.IO v5 packet: `<type>[<attachments>-][<nsp>,][<ackId>][JSON]`.
///
/// `data` may contain `.binary` values anywhere; encoding turns them into placeholders plus
/// attachments (and an EVENT into a BINARY_EVENT, an ACK into a BINARY_ACK), and decoding puts them
/// back.
public struct SocketIOPacket: Sendable, Hashable {
    /// The packet type.
    public var type: SocketIOPacketType
    /// The namespace (`/` by default).
    public var namespace: String
    /// The ack ID, if the packet asks for or answers an ack.
    public var id: Int?
    /// The payload (the event name and arguments, an ack's values, a CONNECT's auth).
    public var data: JSONValue?

    /// Makes a packet; every parameter is the property of the same name.
    public init(type: SocketIOPacketType, namespace: String = "/", id: Int? = nil, data: JSONValue? = nil) {
        self.type = type
        self.namespace = namespace
        self.id = id
        self.data = data
    }

    /// EVENT or BINARY_EVENT.
    public var isEvent: Bool { type == .event || type == .binaryEvent }
    /// ACK or BINARY_ACK.
    public var isAck: Bool { type == .ack || type == .binaryAck }

    /// Event names a server may not send, because the client reserves them for its own events.
    public static let reservedEventNames: Set<String> = [
        "connect", "connect_error", "disconnect", "disconnecting", "newListener", "removeListener",
    ]

    /// The lengths of ``reservedEventNames``, one bit each: an event name of another length (almost
    /// every one) is not reserved, which this tells without hashing it.
    private static let reservedLengths: UInt64 = reservedEventNames.reduce(0) { $0 | 1 << UInt64($1.utf8.count) }

    /// Whether `name` is one of ``reservedEventNames`` (asked of every event the server sends).
    package static func isReserved(_ name: String) -> Bool {
        let length = name.utf8.count
        guard length < 64, reservedLengths & (1 << UInt64(length)) != 0 else { return false }
        return reservedEventNames.contains(name)
    }
}

/// An encoded Socket.IO packet: the text message, then the binary attachments, each one Engine.IO message.
public struct EncodedSocketIOPacket: Sendable, Hashable {
    /// The packet's text.
    public var text: String
    /// The binary attachments, in placeholder order.
    public var attachments: [Data]

    /// The Engine.IO messages that carry it, in order.
    public var engineIOPackets: [EngineIOPacket] {
        [.message(text)] + attachments.map { .message($0) }
    }
}

/// The Socket.IO v5 packet encoding.
public enum SocketIOCodec {
    /// Encodes a packet as socket.io-parser 4 does.
    public static func encode(_ packet: SocketIOPacket) -> EncodedSocketIOPacket {
        let (text, attachments) = encode(packet, after: nil)
        return EncodedSocketIOPacket(text: text, attachments: attachments)
    }

    /// The packet as the text of an Engine.IO message packet (`4` and its encoding: `42["chat",1]`),
    /// made in one buffer, and its attachments.
    static func encodeAsEngineIOMessage(_ packet: SocketIOPacket) -> (text: String, attachments: [Data]) {
        encode(packet, after: EngineIOPacketType.message.character)
    }

    /// Encodes `packet`, its text after `prefix` when there is one.
    private static func encode(_ packet: SocketIOPacket, after prefix: UInt8?) -> (text: String, attachments: [Data]) {
        var type = packet.type
        let hasBinary = packet.data?.containsBinary ?? false
        if hasBinary {
            if type == .event { type = .binaryEvent }
            if type == .ack { type = .binaryAck }
        }
        var out: [UInt8] = []
        out.reserveCapacity(64)
        if let prefix { out.append(prefix) }
        out.append(UInt8(ascii: "0") + type.rawValue)
        var attachments: [Data]? = (type == .binaryEvent || type == .binaryAck) ? [] : nil
        // A binary packet's attachment count comes before its data: its JSON is written first,
        // apart. Any other packet's JSON goes straight after the header.
        var json: [UInt8] = []
        if attachments != nil, let data = packet.data {
            JSONWriter.write(data, into: &json, attachments: &attachments)
        }
        if let attachments {
            JSONWriter.writeInteger(attachments.count, into: &out)
            out.append(UInt8(ascii: "-"))
        }
        if packet.namespace != "/" && !packet.namespace.isEmpty {
            out.append(contentsOf: packet.namespace.utf8)
            out.append(UInt8(ascii: ","))
        }
        if let id = packet.id { JSONWriter.writeInteger(id, into: &out) }
        if attachments != nil {
            out.append(contentsOf: json)
        } else if let data = packet.data {
            JSONWriter.write(data, into: &out, attachments: &attachments)
        }
        return (String(decoding: out, as: UTF8.self), attachments ?? [])
    }

    /// Decodes the text part of a packet. A BINARY_EVENT/BINARY_ACK comes back with its placeholders
    /// still in `data` and the number of attachments to wait for.
    public static func decode(text: String) throws(SocketIOParseError) -> (packet: SocketIOPacket, attachments: Int) {
        return try withUTF8Bytes(text) { bytes throws(SocketIOParseError) in try decode(bytes: bytes) }
    }

    /// Decodes the text part of a packet of `version`'s protocol: for ``SocketIOVersion/v2``
    /// (Socket.IO protocol 4, socket.io-parser 3) a CONNECT, DISCONNECT or ERROR packet may carry
    /// any payload or none (python-socketio 4 sends a refusal's reason in either, or nothing).
    public static func decode(text: String, version: SocketIOVersion) throws(SocketIOParseError) -> (packet: SocketIOPacket, attachments: Int) {
        return try withUTF8Bytes(text) { bytes throws(SocketIOParseError) in try decode(bytes: bytes, legacy: version == .v2) }
    }

    static func decode(bytes: UnsafeRawBufferPointer, legacy: Bool = false) throws(SocketIOParseError) -> (packet: SocketIOPacket, attachments: Int) {
        var attachments = 0
        var eventName = ""
        let packet = try decode(bytes: bytes, legacy: legacy, attachments: &attachments, eventName: &eventName)
        return (packet, attachments)
    }

    /// The packet alone, its attachment count in `attachments`: returning both in a tuple copied
    /// the packet. `eventName`: the name of the last event decoded, reused when this one has the
    /// same (most streams repeat a few names), and set to this event's.
    @inline(__always)
    static func decode(
        bytes: UnsafeRawBufferPointer, legacy: Bool, attachments: inout Int, eventName: inout String
    ) throws(SocketIOParseError) -> SocketIOPacket {
        guard let first = bytes.first else { throw .unknownPacketType("(empty)") }
        guard first >= UInt8(ascii: "0"), let type = SocketIOPacketType(rawValue: first &- UInt8(ascii: "0")) else {
            throw .unknownPacketType(String(decoding: [first], as: UTF8.self))
        }
        var index = 1
        attachments = 0
        if type == .binaryEvent || type == .binaryAck {
            let start = index
            while index < bytes.count && bytes[index] != UInt8(ascii: "-") { index += 1 }
            let digits = UnsafeRawBufferPointer(rebasing: bytes[start..<index])
            guard index < bytes.count, !digits.isEmpty, digits.count <= 9,
                digits.allSatisfy({ (UInt8(ascii: "0")...UInt8(ascii: "9")).contains($0) })
            else {
                throw .illegalAttachments("expected a count followed by '-'")
            }
            attachments = digits.reduce(0) { $0 * 10 + Int($1 - UInt8(ascii: "0")) }
            index += 1
        }
        var namespace = "/"
        if index < bytes.count && bytes[index] == UInt8(ascii: "/") {
            let start = index
            while index < bytes.count && bytes[index] != UInt8(ascii: ",") { index += 1 }
            namespace = String(decoding: UnsafeRawBufferPointer(rebasing: bytes[start..<index]), as: UTF8.self)
            if index < bytes.count { index += 1 }
        }
        var id: Int?
        if index < bytes.count && (UInt8(ascii: "0")...UInt8(ascii: "9")).contains(bytes[index]) {
            var value = 0
            while index < bytes.count, (UInt8(ascii: "0")...UInt8(ascii: "9")).contains(bytes[index]) {
                value = value &* 10 &+ Int(bytes[index] - UInt8(ascii: "0"))
                guard value <= Int(Int32.max) else { throw .invalidPayload("ack id out of range") }
                index += 1
            }
            id = value
        }
        var data: JSONValue?
        if index < bytes.count {
            do {
                data = try JSONReader.parse(UnsafeRawBufferPointer(rebasing: bytes[index...]), reusing: eventName)
            } catch {
                throw SocketIOParseError(error)
            }
        }
        // Checked on its parts, before the packet is made; an event gives its name back.
        if let name = try validate(type, data, legacy: legacy) { eventName = name }
        return SocketIOPacket(type: type, namespace: namespace, id: id, data: data)
    }

    /// socket.io-parser's payload rules per type (socket.io-parser 3, for `legacy`, checks only
    /// events and acks).
    /// Returns an event's name when it is a string.
    @discardableResult
    static func validate(_ type: SocketIOPacketType, _ data: JSONValue?, legacy: Bool = false) throws(SocketIOParseError) -> String? {
        let valid: Bool
        var name: String?
        switch type {
        case .connect where legacy, .disconnect where legacy, .connectError where legacy:
            valid = true
        case .connect:
            valid = if case .none = data { true } else { data?.objectValue != nil }
        case .disconnect:
            valid = if case .none = data { true } else { false }
        case .connectError:
            valid = data?.stringValue != nil || data?.objectValue != nil
        case .event, .binaryEvent:
            guard case .array(let arguments)? = data, let first = arguments.first else {
                valid = false
                break
            }
            switch first {
            case .number, .integer, .unsignedInteger: valid = true
            case .string(let string):
                valid = !SocketIOPacket.isReserved(string)
                name = string
            default: valid = false
            }
        case .ack, .binaryAck:
            valid = if case .array? = data { true } else { false }
        }
        if !valid { throw .invalidPayload("not a valid payload for a \(type) packet") }
        return name
    }

    /// Puts attachments back in place of their placeholders.
    static func reconstruct(_ value: JSONValue, attachments: [Data]) throws(SocketIOParseError) -> JSONValue {
        switch value {
        case .array(let elements):
            var result: [JSONValue] = []
            result.reserveCapacity(elements.count)
            for element in elements { result.append(try reconstruct(element, attachments: attachments)) }
            return .array(result)
        case .object(var members):
            if members["_placeholder"] == .bool(true), let number = members["num"]?.intValue {
                guard attachments.indices.contains(number) else {
                    throw .unexpectedAttachment("placeholder \(number) but only \(attachments.count) attachments")
                }
                return .binary(attachments[number])
            }
            for (key, member) in members { members[key] = try reconstruct(member, attachments: attachments) }
            return .object(members)
        default:
            return value
        }
    }
}

/// Reassembles Socket.IO packets from Engine.IO messages: a text message, then as many binary messages
/// as the packet announced.
public struct SocketIOPacketDecoder: Sendable {
    private var pending: SocketIOPacket?
    /// The last event's name (``SocketIOCodec/decode(bytes:legacy:attachments:eventName:)``).
    private var eventName = ""
    private var expected = 0
    private var buffers: [Data] = []
    private let version: SocketIOVersion

    /// Makes a decoder for `version`'s protocol (socket.io 3.x/4.x servers by default).
    public init(version: SocketIOVersion = .v3) {
        self.version = version
    }

    /// Whether a binary packet is waiting for attachments.
    public var isWaitingForAttachments: Bool { if case .some = pending { true } else { false } }

    /// Feeds a text message; returns the packet when it needs no attachments.
    public mutating func receive(text: String) throws(SocketIOParseError) -> SocketIOPacket? {
        try withUTF8Bytes(text) { bytes throws(SocketIOParseError) in try receive(bytes: bytes) }
    }

    /// Feeds a text message's bytes (UTF-8); returns the packet when it needs no attachments.
    mutating func receive(bytes: UnsafeRawBufferPointer) throws(SocketIOParseError) -> SocketIOPacket? {
        // Not `pending != nil`: on an Equatable optional that goes through generic code copying the packet.
        if case .some = pending { throw .unexpectedAttachment("a text packet arrived while \(expected - buffers.count) attachments were still expected") }
        var attachments = 0
        let packet = try SocketIOCodec.decode(bytes: bytes, legacy: version == .v2, attachments: &attachments, eventName: &eventName)
        guard packet.type == .binaryEvent || packet.type == .binaryAck else { return consume packet }
        if attachments == 0 { return try finish(packet, with: []) }
        // The count decides how many messages are waited for and kept: no more than the packet has
        // placeholders for (socket.io-parser writes exactly that many), so a peer cannot make the
        // client reserve or buffer for a count it made up.
        let placeholders = packet.data.map(Self.placeholderCount) ?? 0
        guard attachments <= placeholders else {
            throw .illegalAttachments("the packet announces \(attachments) attachments but has \(placeholders) placeholders")
        }
        pending = packet
        expected = attachments
        buffers = []
        buffers.reserveCapacity(attachments)
        return nil
    }

    /// Feeds a binary message; returns the packet once its last attachment has arrived.
    public mutating func receive(binary data: Data) throws(SocketIOParseError) -> SocketIOPacket? {
        guard let packet = pending else { throw .unexpectedAttachment("a binary message arrived with no binary packet pending") }
        buffers.append(data)
        guard buffers.count == expected else { return nil }
        let collected = buffers
        pending = nil
        expected = 0
        buffers = []
        return try finish(packet, with: collected)
    }

    private static func placeholderCount(_ value: JSONValue) -> Int {
        switch value {
        case .array(let elements): return elements.reduce(0) { $0 + placeholderCount($1) }
        case .object(let members):
            if members["_placeholder"] == .bool(true), members["num"]?.intValue != nil { return 1 }
            return members.values.reduce(0) { $0 + placeholderCount($1) }
        default: return 0
        }
    }

    private func finish(_ packet: SocketIOPacket, with attachments: [Data]) throws(SocketIOParseError) -> SocketIOPacket {
        var packet = packet
        if let data = packet.data { packet.data = try SocketIOCodec.reconstruct(data, attachments: attachments) }
        return packet
    }
}
