import Foundation
import OrderedCollections
import RealtimeCore

/// SignalR's MessagePack hub protocol (HubProtocol.md, "MessagePack (MsgPack) encoding"): each
/// message is an array whose first element is the type; framed with a VarInt length.
///
/// Values map to `JSONValue` this way: integers and floats become numbers (written back as the
/// smallest integer when integral, else float64), `bin` becomes `.binary`, a timestamp (extension
/// type -1) becomes its ISO 8601 string, other extension values their raw bytes as `.binary`, map
/// keys that are not strings their JSON text. Readers ignore extra trailing array elements.
enum MessagePackHubProtocol {
    /// Appends the VarInt length and the body to `out`, writing the body in place (no buffer of its
    /// own): one byte is kept for the length, and a length over 127 moves the body up to make room.
    static func write(_ message: HubMessage, into out: inout [UInt8]) {
        let start = out.count
        var writer = MessagePackWriter(capacity: 0)
        swap(&writer.bytes, &out)
        writer.bytes.append(0)
        writeBody(message, into: &writer)
        swap(&writer.bytes, &out)
        let length = out.count - start - 1
        if length < 0x80 {
            out[start] = UInt8(length)
            return
        }
        var prefixSize = 1
        while length >> (7 * prefixSize) > 0 { prefixSize += 1 }
        out.insert(contentsOf: repeatElement(0, count: prefixSize - 1), at: start + 1)
        var value = length
        for index in 0..<prefixSize {
            out[start + index] = UInt8(value & 0x7f) | (index < prefixSize - 1 ? 0x80 : 0)
            value >>= 7
        }
    }

    static func writeBody(_ message: HubMessage, into writer: inout MessagePackWriter) {
        switch message {
        case .invocation(let invocation), .streamInvocation(let invocation):
            writer.writeArrayHeader(6)
            writer.writeUnsigned(UInt64(message.type))
            writeHeaders(invocation.headers, into: &writer)
            if let id = invocation.invocationId { writer.writeString(id) } else { writer.writeNil() }
            writer.writeString(invocation.target)
            writer.writeArrayHeader(invocation.arguments.count)
            for argument in invocation.arguments { writeValue(argument, into: &writer) }
            writer.writeArrayHeader(invocation.streamIds.count)
            for id in invocation.streamIds { writer.writeString(id) }
        case .streamItem(let item):
            writer.writeArrayHeader(4)
            writer.writeUnsigned(2)
            writeHeaders(item.headers, into: &writer)
            writer.writeString(item.invocationId)
            writeValue(item.item, into: &writer)
        case .completion(let completion):
            switch completion.outcome {
            case .void:
                writer.writeArrayHeader(4)
                writer.writeUnsigned(3)
                writeHeaders(completion.headers, into: &writer)
                writer.writeString(completion.invocationId)
                writer.writeUnsigned(2)
            case .error(let error):
                writer.writeArrayHeader(5)
                writer.writeUnsigned(3)
                writeHeaders(completion.headers, into: &writer)
                writer.writeString(completion.invocationId)
                writer.writeUnsigned(1)
                writer.writeString(error)
            case .result(let value):
                writer.writeArrayHeader(5)
                writer.writeUnsigned(3)
                writeHeaders(completion.headers, into: &writer)
                writer.writeString(completion.invocationId)
                writer.writeUnsigned(3)
                writeValue(value, into: &writer)
            }
        case .cancelInvocation(let cancel):
            writer.writeArrayHeader(3)
            writer.writeUnsigned(5)
            writeHeaders(cancel.headers, into: &writer)
            writer.writeString(cancel.invocationId)
        case .ping:
            writer.writeArrayHeader(1)
            writer.writeUnsigned(6)
        case .close(let close):
            writer.writeArrayHeader(3)
            writer.writeUnsigned(7)
            if let error = close.error { writer.writeString(error) } else { writer.writeNil() }
            writer.writeBool(close.allowReconnect)
        case .ack(let id), .sequence(let id):
            writer.writeArrayHeader(2)
            writer.writeUnsigned(UInt64(message.type))
            writer.writeInteger(id)
        }
    }

    private static func writeHeaders(_ headers: HubHeaders, into writer: inout MessagePackWriter) {
        writer.writeMapHeader(headers.count)
        for (key, value) in headers {
            writer.writeString(key)
            writer.writeString(value)
        }
    }

    static func writeValue(_ value: JSONValue, into writer: inout MessagePackWriter) {
        switch value {
        case .null: writer.writeNil()
        case .bool(let flag): writer.writeBool(flag)
        case .number(let number):
            // A Double stays a float 64, whole or not (2.0, -0.0), as JSON keeps `2.0`: integers
            // come as `.integer` and `.unsignedInteger`.
            writer.writeDouble(number)
        case .integer(let number): writer.writeInteger(number)
        case .unsignedInteger(let number): writer.writeUnsigned(number)
        case .string(let text): writer.writeString(text)
        case .binary(let data): writer.writeBinary(data)
        case .array(let elements):
            writer.writeArrayHeader(elements.count)
            for element in elements { writeValue(element, into: &writer) }
        case .object(let members):
            writer.writeMapHeader(members.count)
            for (key, member) in members {
                writer.writeString(key)
                writeValue(member, into: &writer)
            }
        }
    }

    // MARK: Reading

    static func parse(_ body: UnsafeRawBufferPointer) throws(HubProtocolError) -> HubMessage {
        var reader = MessagePackReader(body)
        do throws(MessagePackError) {
            let count = try reader.readArrayHeader("message")
            guard count >= 1 else { throw MessagePackError(.unexpectedType, "empty message array", offset: 0) }
            let typeStart = reader.index
            let type: Int64
            do { type = try reader.readInteger("messageType") } catch {
                throw MessagePackError(.unexpectedType, "reading 'messageType' as Int32 failed", offset: typeStart)
            }
            let message: HubMessage
            var used = 1
            func need(_ fields: Int) throws(MessagePackError) {
                guard count >= fields else {
                    throw MessagePackError(.unexpectedType, "message of type \(type) has \(count) elements, \(fields) needed", offset: reader.index)
                }
            }
            switch type {
            case 1, 4:
                // Missing fields show up as the typed read of the next field failing (the .NET wording).
                let headers = try readHeaders(&reader, available: count > 1)
                guard count > 2 else { throw MessagePackError(.unexpectedType, "reading 'invocationId' as String failed", offset: reader.index) }
                let id = type == 1 ? try reader.readOptionalString("invocationId") : try reader.readString("invocationId")
                if let id, id.isEmpty { throw MessagePackError(.unexpectedType, "null or empty invocation ID", offset: reader.index) }
                guard count > 3 else { throw MessagePackError(.unexpectedType, "reading 'target' as String failed", offset: reader.index) }
                let target = try reader.readString("target")
                if target.isEmpty { throw MessagePackError(.unexpectedType, "null or empty target", offset: reader.index) }
                guard count > 4 else { throw MessagePackError(.unexpectedType, "reading array length for 'arguments' failed", offset: reader.index) }
                let argumentCount = try reader.readArrayHeader("arguments")
                var arguments: [JSONValue] = []
                arguments.reserveCapacity(argumentCount)
                for _ in 0..<argumentCount { arguments.append(try readValue(&reader)) }
                var streamIds: [String] = []
                used = 5
                if count > 5 {
                    let idCount = try reader.readArrayHeader("streamIds")
                    for _ in 0..<idCount {
                        let streamId = try reader.readString("streamIds")
                        if streamId.isEmpty { throw MessagePackError(.unexpectedType, "null or empty value in streamIds received", offset: reader.index) }
                        streamIds.append(streamId)
                    }
                    used = 6
                }
                let invocation = HubInvocation(invocationId: id, target: target, arguments: arguments, streamIds: streamIds, headers: headers)
                message = type == 1 ? .invocation(invocation) : .streamInvocation(invocation)
            case 2:
                let headers = try readHeaders(&reader, available: count > 1)
                let id = try readId(&reader, available: count > 2)
                try need(4)
                message = .streamItem(HubStreamItem(invocationId: id, item: try readValue(&reader), headers: headers))
                used = 4
            case 3:
                let headers = try readHeaders(&reader, available: count > 1)
                let id = try readId(&reader, available: count > 2)
                try need(4)
                let kindStart = reader.index
                let kind: Int64
                do { kind = try reader.readInteger("resultKind") } catch {
                    throw MessagePackError(.unexpectedType, "reading 'resultKind' as Int32 failed", offset: kindStart)
                }
                switch kind {
                case 1:
                    guard count > 4 else { throw MessagePackError(.unexpectedType, "reading 'error' as String failed", offset: reader.index) }
                    message = .completion(HubCompletion(invocationId: id, outcome: .error(try reader.readString("error")), headers: headers))
                    used = 5
                case 2:
                    message = .completion(HubCompletion(invocationId: id, outcome: .void, headers: headers))
                    used = 4
                case 3:
                    try need(5)
                    message = .completion(HubCompletion(invocationId: id, outcome: .result(try readValue(&reader)), headers: headers))
                    used = 5
                default:
                    throw MessagePackError(.unexpectedType, "invalid invocation result kind", offset: kindStart)
                }
            case 5:
                let headers = try readHeaders(&reader, available: count > 1)
                message = .cancelInvocation(HubCancelInvocation(invocationId: try readId(&reader, available: count > 2), headers: headers))
                used = 3
            case 6:
                message = .ping
            case 7:
                var error: String?
                var allowReconnect = false
                if count > 1 { error = try reader.readOptionalString("error"); used = 2 }
                if count > 2 { allowReconnect = try reader.readBool("allowReconnect"); used = 3 }
                message = .close(HubClose(error: error, allowReconnect: allowReconnect))
            case 8, 9:
                guard count > 1 else { throw MessagePackError(.unexpectedType, "reading 'sequenceId' as Int64 failed", offset: reader.index) }
                let idStart = reader.index
                let id: Int64
                do { id = try reader.readInteger("sequenceId") } catch {
                    throw MessagePackError(.unexpectedType, "reading 'sequenceId' as Int64 failed", offset: idStart)
                }
                message = type == 8 ? .ack(sequenceId: id) : .sequence(sequenceId: id)
                used = 2
            default:
                throw MessagePackError(.unexpectedType, "unknown message type \(type)", offset: typeStart)
            }
            // Extra trailing elements are ignored, but they must still be well-formed.
            for _ in used..<max(used, count) { try reader.skip() }
            return message
        } catch {
            throw HubProtocolError(error.reason.prefix(1).uppercased() + error.reason.dropFirst() + " (MessagePack, byte \(error.offset))")
        }
    }

    private static func readHeaders(_ reader: inout MessagePackReader, available: Bool) throws(MessagePackError) -> HubHeaders {
        guard available else { throw MessagePackError(.unexpectedType, "reading map length for 'headers' failed", offset: reader.index) }
        // Tolerant: a headers value that is not a map is skipped (aiosignalr 0.1.1 writes its empty
        // headers as the integer 128, `cc 80`, instead of the empty map `80`).
        let first = try reader.peek()
        guard (0x80...0x8f).contains(first) || first == 0xde || first == 0xdf else {
            try reader.skip()
            return [:]
        }
        let count = try reader.readMapHeader("headers")
        var headers = HubHeaders()
        for index in 0..<count {
            let key = try reader.readString("headers[\(index)].Key")
            let value = try reader.readString("headers[\(index)].Value")
            if key.isEmpty { throw MessagePackError(.unexpectedType, "null or empty key in header", offset: reader.index) }
            if value.isEmpty { throw MessagePackError(.unexpectedType, "null or empty value in header", offset: reader.index) }
            headers[key] = value
        }
        return headers
    }

    private static func readId(_ reader: inout MessagePackReader, available: Bool) throws(MessagePackError) -> String {
        guard available else { throw MessagePackError(.unexpectedType, "reading 'invocationId' as String failed", offset: reader.index) }
        let id = try reader.readString("invocationId")
        if id.isEmpty { throw MessagePackError(.unexpectedType, "null or empty invocation ID", offset: reader.index) }
        return id
    }

    static func readValue(_ reader: inout MessagePackReader) throws(MessagePackError) -> JSONValue {
        try reader.readJSONValue()
    }

    static func jsonValue(_ value: MessagePackValue) -> JSONValue {
        switch value {
        case .nil: .null
        case .bool(let flag): .bool(flag)
        case .int(let number): .integer(number)
        case .uint(let number): Int64(exactly: number).map { .integer($0) } ?? .unsignedInteger(number)
        case .float(let number): .number(Double(number))
        case .double(let number): .number(number)
        case .string(let text): .string(text)
        case .binary(let bytes): .binary(Data(bytes))
        case .array(let elements): .array(elements.map(jsonValue))
        case .map(let pairs):
            .object(OrderedDictionary(pairs.map { pair in
                let key: String = if case .string(let text) = pair.key { text } else { jsonValue(pair.key).jsonString }
                return (key, jsonValue(pair.value))
            }, uniquingKeysWith: { _, last in last }))
        case .ext(let type, let data):
            if type == -1, let date = value.timestamp {
                .string(Self.iso8601(date))
            } else {
                .binary(Data(data))
            }
        }
    }

    static func iso8601(_ date: Date) -> String {
        let formatter = ISO8601DateFormatter()
        formatter.formatOptions = date.timeIntervalSince1970.rounded() == date.timeIntervalSince1970
            ? [.withInternetDateTime] : [.withInternetDateTime, .withFractionalSeconds]
        return formatter.string(from: date)
    }
}
