import Foundation
import OrderedCollections
import RealtimeCore

/// SignalR's JSON hub protocol (HubProtocol.md, "JSON Encoding"). Written in SignalR's field order,
/// compact, non-ASCII unescaped; `.binary` values are written as base64 strings (as .NET writes
/// `byte[]`). Read tolerantly where real servers are sloppy (unknown fields, a `headers` value of
/// another type, a header value that is not a string: skipped) and strictly where the spec is.
enum JSONHubProtocol {
    static func write(_ message: HubMessage, into out: inout [UInt8]) {
        out.append(contentsOf: #"{"type":"#.utf8)
        JSONWriter.writeInteger(message.type, into: &out)
        switch message {
        case .invocation(let invocation), .streamInvocation(let invocation):
            writeHeaders(invocation.headers, into: &out)
            if let id = invocation.invocationId { writeField("invocationId", id, into: &out) }
            writeField("target", invocation.target, into: &out)
            out.append(contentsOf: #","arguments":["#.utf8)
            for (index, argument) in invocation.arguments.enumerated() {
                if index > 0 { out.append(UInt8(ascii: ",")) }
                writeValue(argument, into: &out)
            }
            out.append(UInt8(ascii: "]"))
            if !invocation.streamIds.isEmpty {
                out.append(contentsOf: #","streamIds":["#.utf8)
                for (index, id) in invocation.streamIds.enumerated() {
                    if index > 0 { out.append(UInt8(ascii: ",")) }
                    JSONWriter.writeString(id, into: &out)
                }
                out.append(UInt8(ascii: "]"))
            }
        case .streamItem(let item):
            writeHeaders(item.headers, into: &out)
            writeField("invocationId", item.invocationId, into: &out)
            out.append(contentsOf: #","item":"#.utf8)
            writeValue(item.item, into: &out)
        case .completion(let completion):
            writeHeaders(completion.headers, into: &out)
            writeField("invocationId", completion.invocationId, into: &out)
            switch completion.outcome {
            case .void: break
            case .error(let error): writeField("error", error, into: &out)
            case .result(let value):
                out.append(contentsOf: #","result":"#.utf8)
                writeValue(value, into: &out)
            }
        case .cancelInvocation(let cancel):
            writeHeaders(cancel.headers, into: &out)
            writeField("invocationId", cancel.invocationId, into: &out)
        case .ping:
            break
        case .close(let close):
            if let error = close.error { writeField("error", error, into: &out) }
            if close.allowReconnect { out.append(contentsOf: #","allowReconnect":true"#.utf8) }
        case .ack(let id), .sequence(let id):
            out.append(contentsOf: #","sequenceId":"#.utf8)
            out.append(contentsOf: String(id).utf8)
        }
        out.append(UInt8(ascii: "}"))
        out.append(0x1E)
    }

    private static func writeField(_ name: StaticString, _ value: String, into out: inout [UInt8]) {
        out.append(contentsOf: ",\"".utf8)
        out.append(contentsOf: UnsafeBufferPointer(start: name.utf8Start, count: name.utf8CodeUnitCount))
        out.append(contentsOf: #"":"#.utf8)
        JSONWriter.writeString(value, into: &out)
    }

    private static func writeHeaders(_ headers: HubHeaders, into out: inout [UInt8]) {
        guard !headers.isEmpty else { return }
        out.append(contentsOf: #","headers":{"#.utf8)
        var first = true
        for (key, value) in headers {
            if !first { out.append(UInt8(ascii: ",")) }
            first = false
            JSONWriter.writeString(key, into: &out)
            out.append(UInt8(ascii: ":"))
            JSONWriter.writeString(value, into: &out)
        }
        out.append(UInt8(ascii: "}"))
    }

    static func writeValue(_ value: JSONValue, into out: inout [UInt8]) {
        var none: [Data]? = nil
        if value.containsBinary {
            JSONWriter.write(value.base64EncodingBinary(), into: &out, attachments: &none)
        } else {
            JSONWriter.write(value, into: &out, attachments: &none)
        }
    }

    // MARK: Reading

    /// The members a hub message may have, read without building the object; a repeated member
    /// keeps its last value (as a JSON object would), others are skipped. The members every
    /// invocation has are read as the type they must be (no `JSONValue` made and taken apart);
    /// one of another type is kept as its `JSONValue`, for the error that names it.
    private struct Members {
        var type, headers, invocationId, target, arguments, streamIds, item, result, error, allowReconnect, sequenceId: JSONValue?
        var typeNumber: Int64?
        var invocationIdText, targetText: String?
        var argumentList: [JSONValue]?

        /// Reads the value of the member `key` (UTF-8) names: told apart by length, then compared
        /// byte by byte, with no string made of the key. Another member's value is left unread
        /// (the reader skips it).
        mutating func read(_ key: UnsafeRawBufferPointer, _ reader: inout JSONReader) throws(JSONParseError) {
            switch key.count {
            case 4 where Self.is(key, "type"):
                typeNumber = try reader.integer()
                if typeNumber == nil { type = try reader.value() } else { type = nil }
            case 6 where Self.is(key, "target"):
                targetText = try reader.string()
                if targetText == nil { target = try reader.value() } else { target = nil }
            case 9 where Self.is(key, "arguments"):
                argumentList = try reader.array()
                if argumentList == nil { arguments = try reader.value() } else { arguments = nil }
            case 12 where Self.is(key, "invocationId"):
                invocationIdText = try reader.string()
                if invocationIdText == nil { invocationId = try reader.value() } else { invocationId = nil }
            default:
                set(key, try reader.value())
            }
        }

        /// Keeps `value` if `key` (UTF-8) names one of the other members of a hub message.
        private mutating func set(_ key: UnsafeRawBufferPointer, _ value: JSONValue) {
            switch key.count {
            case 4:
                if Self.is(key, "item") { item = value }
            case 5:
                if Self.is(key, "error") { error = value }
            case 6:
                if Self.is(key, "result") { result = value }
            case 7:
                if Self.is(key, "headers") { headers = value }
            case 9:
                if Self.is(key, "streamIds") { streamIds = value }
            case 10:
                if Self.is(key, "sequenceId") { sequenceId = value }
            case 14:
                if Self.is(key, "allowReconnect") { allowReconnect = value }
            default:
                break
            }
        }

        /// Whether `key` is `name`'s UTF-8 (of the same length, which the caller checked).
        private static func `is`(_ key: UnsafeRawBufferPointer, _ name: StaticString) -> Bool {
            let expected = UnsafeRawBufferPointer(start: name.utf8Start, count: name.utf8CodeUnitCount)
            for index in 0..<expected.count where key[index] != expected[index] { return false }
            return true
        }
    }

    static func parse(_ body: UnsafeRawBufferPointer) throws(HubProtocolError) -> HubMessage {
        var object = Members()
        let isObject: Bool
        do {
            isObject = try JSONReader.parseMembers(body) { (key, reader) throws(JSONParseError) in try object.read(key, &reader) }
        } catch {
            throw HubProtocolError("error reading JSON: \(error)")
        }
        guard isObject else { throw HubProtocolError("unexpected JSON token: expected a JSON object") }
        let type: Int
        if let number = object.typeNumber, let exact = Int(exactly: number) {
            type = exact
        } else {
            guard let typeValue = object.type else { throw HubProtocolError("missing required property 'type'") }
            guard let number = typeValue.intValue else { throw HubProtocolError("expected 'type' to be of type Number") }
            type = number
        }
        let headers = readHeaders(object.headers)
        switch type {
        case 1, 4:
            // The members are taken out of `object` (no copy of each, then a release at its end).
            let id = try optionalString(object.invocationIdText.take(), object.invocationId, "invocationId")
            if type == 4, id == nil { throw HubProtocolError("missing required property 'invocationId'") }
            if let id, id.isEmpty { throw HubProtocolError("null or empty invocation ID") }
            guard let target = try optionalString(object.targetText.take(), object.target, "target") else {
                throw HubProtocolError("missing required property 'target'")
            }
            let arguments: [JSONValue]
            if let list = object.argumentList.take() {
                arguments = list
            } else {
                guard let argumentsValue = object.arguments else { throw HubProtocolError("missing required property 'arguments'") }
                guard case .array(let list) = argumentsValue else { throw HubProtocolError("expected 'arguments' to be of type Array") }
                arguments = list
            }
            var streamIds: [String] = []
            if let ids = object.streamIds, ids != .null {
                guard case .array(let elements) = ids else { throw HubProtocolError("expected 'streamIds' to be of type Array") }
                for element in elements {
                    guard case .string(let id) = element, !id.isEmpty else { throw HubProtocolError("null or empty value in streamIds") }
                    streamIds.append(id)
                }
            }
            let invocation = HubInvocation(invocationId: id, target: target, arguments: arguments, streamIds: streamIds, headers: headers)
            return type == 1 ? .invocation(invocation) : .streamInvocation(invocation)
        case 2:
            let id = try requiredId(object)
            guard let item = object.item else { throw HubProtocolError("missing required property 'item'") }
            return .streamItem(HubStreamItem(invocationId: id, item: item, headers: headers))
        case 3:
            let id = try requiredId(object)
            let error = try optionalString(object.error, "error")
            let result = object.result
            if let error {
                if let result, result != .null { throw HubProtocolError("the 'error' and 'result' properties are mutually exclusive") }
                return .completion(HubCompletion(invocationId: id, outcome: .error(error), headers: headers))
            }
            if let result { return .completion(HubCompletion(invocationId: id, outcome: .result(result), headers: headers)) }
            return .completion(HubCompletion(invocationId: id, outcome: .void, headers: headers))
        case 5:
            return .cancelInvocation(HubCancelInvocation(invocationId: try requiredId(object), headers: headers))
        case 6:
            return .ping
        case 7:
            let error = try optionalString(object.error, "error")
            var allowReconnect = false
            if let flag = object.allowReconnect, flag != .null {
                guard case .bool(let value) = flag else { throw HubProtocolError("expected 'allowReconnect' to be of type Boolean") }
                allowReconnect = value
            }
            return .close(HubClose(error: error, allowReconnect: allowReconnect))
        case 8, 9:
            guard let idValue = object.sequenceId else { throw HubProtocolError("missing required property 'sequenceId'") }
            guard let number = idValue.int64Value, number >= 0 else {
                throw HubProtocolError("expected 'sequenceId' to be of type Number")
            }
            return type == 8 ? .ack(sequenceId: number) : .sequence(sequenceId: number)
        default:
            throw HubProtocolError("unknown message type \(type)")
        }
    }

    private static func readHeaders(_ value: JSONValue?) -> HubHeaders {
        // Tolerant: a headers value that is not an object, or a header that is not a string, is skipped.
        guard case .object(let members)? = value else { return [:] }
        var headers = HubHeaders()
        for (key, value) in members {
            if case .string(let text) = value { headers[key] = text }
        }
        return headers
    }

    private static func optionalString(_ value: JSONValue?, _ key: String) throws(HubProtocolError) -> String? {
        guard let value else { return nil }
        guard case .string(let text) = value else { throw HubProtocolError("expected '\(key)' to be of type String") }
        return text
    }

    /// A member read as a string (`text`), else its value of another kind (an error), else nil.
    private static func optionalString(_ text: String?, _ value: JSONValue?, _ key: String) throws(HubProtocolError) -> String? {
        if let text { return text }
        return try optionalString(value, key)
    }

    private static func requiredId(_ object: Members) throws(HubProtocolError) -> String {
        guard let id = try optionalString(object.invocationIdText, object.invocationId, "invocationId") else {
            throw HubProtocolError("missing required property 'invocationId'")
        }
        guard !id.isEmpty else { throw HubProtocolError("null or empty invocation ID") }
        return id
    }
}

extension JSONValue {
    /// The value with every `.binary` replaced by its base64 string (SignalR's JSON form of bytes).
    func base64EncodingBinary() -> JSONValue {
        switch self {
        case .binary(let data): .string(data.base64EncodedString())
        case .array(let elements): .array(elements.map { $0.base64EncodingBinary() })
        case .object(let members): .object(members.mapValues { $0.base64EncodingBinary() })
        default: self
        }
    }
}
