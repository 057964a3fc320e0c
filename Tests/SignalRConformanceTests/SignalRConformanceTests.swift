import Foundation
import OrderedCollections
import RealtimeCore
@testable import SignalRHub
import Testing

/// The verified encodings of `Resources/signalr-vectors.json` (taken from dotnet/aspnetcore's
/// C# and TypeScript test suites; see `signalr-vectors.md`) as data-driven tests: every entry is
/// parsed and, where it is written in that direction, encoded byte for byte.
@Suite("SignalR conformance vectors")
struct SignalRConformanceTests {
    static let vectors: JSONValue = {
        let url = Bundle.module.url(forResource: "signalr-vectors", withExtension: "json")!
        return try! JSONValue(parsing: String(decoding: try! Data(contentsOf: url), as: UTF8.self))
    }()

    static func section(_ name: String) -> [JSONValue] { Self.vectors[name]?.arrayValue ?? [] }

    // MARK: MessagePack

    static let messagePackEntries = section("messagepack")

    @Test("MessagePack: parse each body into the expected message", arguments: messagePackEntries)
    func messagePackParse(_ entry: JSONValue) throws {
        guard entry["direction"] != "write" else { return }
        let body = bytes(hex: entry["bodyHex"]!.stringValue!)
        let parsed = try body.withUnsafeBytes { try MessagePackHubProtocol.parse($0) }
        #expect(parsed == Self.hubMessage(entry["message"]!), "\(entry["name"]!)")
        // The framed form splits into exactly this body.
        var framer = HubMessageFramer(.messagePack)
        var bodies: [[UInt8]] = []
        try framer.consume(bytes(hex: entry["framedHex"]!.stringValue!)) { bodies.append(Array($0)) }
        #expect(bodies == [body])
    }

    /// Entries whose message carries a float32 or timestamp, or a float64 with an integral value:
    /// `JSONValue` has one number type and turns timestamps into strings, so the hub writer cannot
    /// reproduce those bytes. Their exact bytes are checked at the MessagePack value level
    /// (`messagePackValueRoundTrip`); the hub level parses them.
    static func writesExactly(_ message: JSONValue) -> Bool {
        !containsTag(message) { tag, value in
            switch tag {
            case "$float32", "$timestamp": true
            case "$float64": value.doubleValue.map { $0.rounded() == $0 } ?? true
            default: false
            }
        }
    }

    @Test("MessagePack: write each message byte for byte, with and without the length prefix", arguments: messagePackEntries)
    func messagePackWrite(_ entry: JSONValue) throws {
        guard entry["direction"] != "parse", Self.writesExactly(entry["message"]!) else { return }
        let message = Self.hubMessage(entry["message"]!)
        var writer = MessagePackWriter()
        MessagePackHubProtocol.writeBody(message, into: &writer)
        #expect(hex(writer.bytes) == entry["bodyHex"]!.stringValue!, "\(entry["name"]!)")
        #expect(hex(HubProtocolCodec(.messagePack).encode(message)) == entry["framedHex"]!.stringValue!)
    }

    @Test("MessagePack: the writer covers all but the entries a JSONValue cannot express")
    func messagePackWriteCoverage() {
        let written = Self.messagePackEntries.filter { $0["direction"] != "parse" }
        let exact = written.filter { Self.writesExactly($0["message"]!) }
        // 58 entries are written; the rest use float32, timestamps or integral float64 values.
        #expect(written.count == 58)
        #expect(exact.count == 44, "entries written exactly: \(exact.count)")
    }

    @Test("MessagePack: every body decodes to values that encode to the same bytes", arguments: messagePackEntries)
    func messagePackValueRoundTrip(_ entry: JSONValue) throws {
        guard entry["direction"] == "both" else { return }
        let body = bytes(hex: entry["bodyHex"]!.stringValue!)
        let value = try MessagePackReader.decode(body)
        #expect(hex(MessagePackWriter.encode(value)) == hex(body), "\(entry["name"]!)")
    }

    @Test("MessagePack: invalid bodies are refused with a typed error", arguments: section("messagepackInvalid"))
    func messagePackInvalid(_ entry: JSONValue) throws {
        let body = bytes(hex: entry["bodyHex"]?.stringValue ?? "")
        switch entry["expect"]!.stringValue! {
        case "throws":
            #expect(throws: HubProtocolError.self, "\(entry["name"]!)") { try body.withUnsafeBytes { try MessagePackHubProtocol.parse($0) } }
        case "incomplete":
            var framer = HubMessageFramer(.messagePack)
            var count = 0
            let framed = bytes(hex: entry["framedHex"]!.stringValue!)
            try framer.consume(framed) { _ in count += 1 }
            #expect(count == 0)
            #expect(framer.bufferedByteCount == framed.count)
        case "bindingFailure":
            // Either the message is refused, or its arguments do not bind to the handler's types.
            let parsed = try? body.withUnsafeBytes { try MessagePackHubProtocol.parse($0) }
            if let parsed { try Self.expectBindingFailure(parsed, entry) }
        default:
            Issue.record("unknown expectation \(entry["expect"]!)")
        }
    }

    // MARK: JSON

    static let jsonEntries = section("json")

    @Test("JSON: parse each text into the expected message", arguments: jsonEntries)
    func jsonParse(_ entry: JSONValue) throws {
        guard entry["direction"] != "write" else { return }
        let text = Array(entry["json"]!.stringValue!.utf8)
        let parsed = try text.withUnsafeBytes { try JSONHubProtocol.parse($0) }
        #expect(parsed == Self.hubMessage(entry["message"]!), "\(entry["name"]!)")
    }

    @Test("JSON: write each message exactly as the reference does", arguments: jsonEntries)
    func jsonWrite(_ entry: JSONValue) throws {
        guard entry["direction"] != "parse" else { return }
        let encoded = HubProtocolCodec(.json).encode(Self.hubMessage(entry["message"]!))
        #expect(encoded.last == 0x1E)
        #expect(String(decoding: encoded.dropLast(), as: UTF8.self) == entry["json"]!.stringValue!, "\(entry["name"]!)")
    }

    @Test("JSON: invalid texts are refused with a typed error", arguments: section("jsonInvalid"))
    func jsonInvalid(_ entry: JSONValue) throws {
        let text = Array(entry["input"]!.stringValue!.utf8)
        switch entry["expect"]!.stringValue! {
        case "throws":
            #expect(throws: HubProtocolError.self, "\(entry["name"]!)") { try text.withUnsafeBytes { try JSONHubProtocol.parse($0) } }
        case "bindingFailure":
            let parsed = try? text.withUnsafeBytes { try JSONHubProtocol.parse($0) }
            if let parsed { try Self.expectBindingFailure(parsed, entry) }
        default:
            Issue.record("unknown expectation \(entry["expect"]!)")
        }
    }

    /// The handler types of the binding tests, as Swift types.
    static func expectBindingFailure(_ message: HubMessage, _ entry: JSONValue) throws {
        let arguments: [JSONValue]
        switch message {
        case .invocation(let invocation), .streamInvocation(let invocation): arguments = invocation.arguments
        default:
            Issue.record("\(entry["name"]!) is not an invocation")
            return
        }
        let types = entry["binderParameterTypes"]?.arrayValue?.compactMap(\.stringValue) ?? []
        #expect(throws: HubBindingError.self, "\(entry["name"]!)") {
            switch types {
            case ["int", "string"]: _ = try HubArgumentBinder.bind(arguments, as: Int.self, String.self)
            case ["string"]: _ = try HubArgumentBinder.bind(arguments, as: String.self)
            case ["int[]"]: _ = try HubArgumentBinder.bind(arguments, as: [Int].self)
            default: Issue.record("no Swift types for \(types)")
            }
        }
    }

    // MARK: Several messages, round trips, sizes

    @Test("Several messages in one payload", arguments: section("multipleMessages"))
    func multipleMessages(_ entry: JSONValue) throws {
        let kind: HubProtocolType = entry["protocol"] == "json" ? .json : .messagePack
        let input = kind == .json ? Array(entry["input"]!.stringValue!.utf8) : bytes(hex: entry["framedHex"]!.stringValue!)
        var framer = HubMessageFramer(kind)
        var messages: [HubMessage] = []
        try framer.consume(input) { (body) throws(HubProtocolError) in messages.append(try HubProtocolCodec(kind).decode(body: body)) }
        #expect(messages == entry["messages"]!.arrayValue!.map(Self.hubMessage))
        #expect(framer.bufferedByteCount == 0)
    }

    @Test("Write then read gives the message back", arguments: section("roundTrip"))
    func roundTrip(_ entry: JSONValue) throws {
        let kind: HubProtocolType = entry["protocol"] == "json" ? .json : .messagePack
        let message = Self.hubMessage(entry["message"]!)
        let codec = HubProtocolCodec(kind)
        var framer = HubMessageFramer(kind)
        var messages: [HubMessage] = []
        try framer.consume(codec.encode(message)) { (body) throws(HubProtocolError) in messages.append(try codec.decode(body: body)) }
        #expect(messages == [message], "\(entry["name"]!)")
    }

    @Test("Encoded sizes match the reference", arguments: section("messageSizes"))
    func messageSizes(_ entry: JSONValue) throws {
        let kind: HubProtocolType = entry["protocol"] == "json" ? .json : .messagePack
        let encoded = HubProtocolCodec(kind).encode(Self.hubMessage(entry["message"]!))
        #expect(encoded.count == entry["size"]!.intValue!, "\(entry["name"]!)")
    }

    // MARK: Handshake

    @Test("Handshake requests parse to protocol and version", arguments: Self.vectors["handshake"]!["requestParse"]!.arrayValue!)
    func handshakeRequest(_ entry: JSONValue) throws {
        let parsed = try #require(try HubHandshake.parseRequest(Array(entry["input"]!.stringValue!.utf8)))
        #expect(parsed.protocol == entry["protocol"]!.stringValue!)
        #expect(parsed.version == entry["version"]!.intValue!)
    }

    @Test("Handshake responses: accepted or refused with the server's text", arguments: Self.vectors["handshake"]!["responseParse"]!.arrayValue!)
    func handshakeResponse(_ entry: JSONValue) throws {
        let input = Array(entry["input"]!.stringValue!.utf8)
        let response = try HubHandshake.parseResponse(input)
        if let error = entry["error"]?.stringValue {
            #expect(response == .refused(error, consumed: input.count))
        } else {
            #expect(response == .accepted(consumed: input.count))
        }
    }

    @Test("Invalid handshakes are typed errors; an incomplete one waits")
    func handshakeInvalid() throws {
        let handshake = Self.vectors["handshake"]!
        for entry in handshake["requestInvalid"]!.arrayValue! {
            #expect(throws: HubProtocolError.self) { try HubHandshake.parseRequest(Array(entry["input"]!.stringValue!.utf8)) }
        }
        for entry in handshake["responseInvalid"]!.arrayValue! {
            #expect(throws: HubProtocolError.self) { try HubHandshake.parseResponse(Array(entry["input"]!.stringValue!.utf8)) }
        }
        for entry in handshake["requestIncomplete"]!.arrayValue! {
            #expect(try HubHandshake.parseRequest(Array(entry["input"]!.stringValue!.utf8)) == nil)
        }
        #expect(String(decoding: HubHandshake.request(.json), as: UTF8.self) == "{\"protocol\":\"json\",\"version\":1}\u{1E}")
    }

    /// Not in the vectors: the reference clients (the C# HandshakeProtocol and the TypeScript
    /// client) refuse a handshake response that has a "type", i.e. a message sent before the
    /// handshake response; a "minorVersion" is fine.
    @Test("A message in place of the handshake response is refused; minorVersion is accepted")
    func handshakeResponseWithType() throws {
        for input in [#"{"type":1,"target":"send","arguments":[]}"#, #"{"type":"foo"}"#, #"{"error":"x","type":6}"#] {
            let error = #expect(throws: HubProtocolError.self) { try HubHandshake.parseResponse(Array((input + "\u{1E}").utf8)) }
            #expect(error.map { "\($0)" }?.contains("expected a handshake response") == true, "\(input)")
        }
        let accepted = Array("{\"minorVersion\":1}\u{1E}".utf8)
        #expect(try HubHandshake.parseResponse(accepted) == .accepted(consumed: accepted.count))
    }

    // MARK: Framing

    @Test("VarInt length prefixes", arguments: Self.vectors["framing"]!["varint"]!.arrayValue!)
    func varint(_ entry: JSONValue) throws {
        var out: [UInt8] = []
        VarInt.write(entry["length"]!.intValue!, into: &out)
        #expect(hex(out) == entry["hex"]!.stringValue!)
        let read = try out.withUnsafeBytes { try VarInt.read($0) }
        #expect(read?.length == entry["length"]!.intValue!)
        #expect(read?.size == out.count)
    }

    /// The MessagePack writer puts the body in place after one byte kept for the length and moves it
    /// up when the length needs more: bodies whose length sits on each VarInt size boundary, appended
    /// after bytes already in the buffer, come out as prefix + body and read back.
    @Test("MessagePack messages framed in place: lengths on every VarInt size boundary", arguments: [
        0x7e, 0x7f, 0x80, 0x81, 0x3fff, 0x4000, 0x4001, 0x1f_ffff, 0x20_0000,
    ])
    func messagePackFramedInPlace(bodyLength: Int) throws {
        // An invocation whose only variable part is one string argument; find the string length that
        // gives the body length wanted.
        func body(_ text: String) -> [UInt8] {
            var writer = MessagePackWriter()
            MessagePackHubProtocol.writeBody(.invocation(HubInvocation(invocationId: "1", target: "T", arguments: [.string(text)])), into: &writer)
            return writer.bytes
        }
        var textLength = max(0, bodyLength - body("").count)
        while body(String(repeating: "x", count: textLength)).count > bodyLength { textLength -= 1 }
        let text = String(repeating: "x", count: textLength)
        let expectedBody = body(text)
        try #require(expectedBody.count == bodyLength)
        let message = HubMessage.invocation(HubInvocation(invocationId: "1", target: "T", arguments: [.string(text)]))
        let before: [UInt8] = [0xde, 0xad, 0xbe, 0xef]
        var out = before
        HubProtocolCodec(.messagePack).write(message, into: &out)
        var expected = before
        VarInt.write(expectedBody.count, into: &expected)
        expected += expectedBody
        #expect(out == expected, "body of \(expectedBody.count) bytes")
        var framer = HubMessageFramer(.messagePack)
        var decoded: [HubMessage] = []
        try framer.consume(Array(out.dropFirst(before.count))) { (body) throws(HubProtocolError) in
            decoded.append(try HubProtocolCodec(.messagePack).decode(body: body))
        }
        #expect(decoded == [message])
    }

    @Test("Binary framing: write, parse, invalid and incomplete inputs")
    func binaryFraming() throws {
        let binary = Self.vectors["framing"]!["binary"]!
        for entry in binary["write"]!.arrayValue! {
            let payloads = entry["payloadsHex"]?.arrayValue?.map { bytes(hex: $0.stringValue!) } ?? [bytes(hex: entry["payloadHex"]!.stringValue!)]
            var out: [UInt8] = []
            for payload in payloads {
                VarInt.write(payload.count, into: &out)
                out += payload
            }
            #expect(hex(out) == entry["framedHex"]!.stringValue!, "\(entry["name"]!)")
        }
        for entry in binary["parse"]!.arrayValue! {
            var framer = HubMessageFramer(.messagePack)
            var messages: [String] = []
            try framer.consume(bytes(hex: entry["inputHex"]!.stringValue!)) { messages.append(hex(Array($0))) }
            #expect(messages == entry["messagesHex"]!.arrayValue!.map { $0.stringValue! }, "\(entry["name"]!)")
            #expect(framer.bufferedByteCount == 0)
        }
        // A stream parser either refuses a prefix over 2 GB or waits for the rest: the TypeScript
        // client's "incomplete" errors are inputs it sees whole, which a stream keeps for later.
        for entry in binary["invalid"]!.arrayValue! {
            let input = bytes(hex: entry["inputHex"]!.stringValue!)
            var framer = HubMessageFramer(.messagePack, maximumMessageSize: Int(Int32.max))
            let error = entry["error"]!.stringValue!
            if error.contains("2GB") {
                #expect(throws: HubProtocolError.self, "\(entry["inputHex"]!)") { try framer.consume(input) { _ in } }
            } else {
                try framer.consume(input) { _ in }
                #expect(framer.bufferedByteCount > 0, "\(entry["inputHex"]!) waits for more")
            }
        }
        for entry in binary["incomplete"]!.arrayValue! {
            var framer = HubMessageFramer(.messagePack, maximumMessageSize: Int(Int32.max))
            let input = bytes(hex: entry["inputHex"]!.stringValue!)
            var count = 0
            try framer.consume(input) { _ in count += 1 }
            #expect(count == 0)
            #expect(framer.bufferedByteCount == input.count)
        }
        // With the default 32 MiB limit, a 2 GB announcement is refused before anything is buffered.
        var limited = HubMessageFramer(.messagePack)
        #expect(throws: HubProtocolError.self) { try limited.consume(bytes(hex: "ffffffff07")) { _ in } }
    }

    @Test("Text framing: 0x1E ends each message, a tail waits")
    func textFraming() throws {
        let text = Self.vectors["framing"]!["text"]!
        for entry in text["parse"]!.arrayValue! {
            var framer = HubMessageFramer(.json)
            var messages: [String] = []
            try framer.consume(Array(entry["input"]!.stringValue!.utf8)) { messages.append(String(decoding: $0, as: UTF8.self)) }
            #expect(messages == entry["messages"]!.arrayValue!.map { $0.stringValue! })
            #expect(framer.bufferedByteCount == entry["remainder"]!.stringValue!.utf8.count)
        }
        for entry in text["invalid"]!.arrayValue! {
            // Whole-input parsers throw "incomplete"; a stream keeps the tail.
            var framer = HubMessageFramer(.json)
            let input = Array(entry["input"]!.stringValue!.utf8)
            try framer.consume(input) { _ in }
            let tail = input.count - (input.lastIndex(of: 0x1E).map { $0 + 1 } ?? 0)
            #expect(framer.bufferedByteCount == tail)
        }
        var limited = HubMessageFramer(.json, maximumMessageSize: 16)
        #expect(throws: HubProtocolError.self) { try limited.consume(Array(repeating: UInt8(ascii: "a"), count: 17)) { _ in } }
    }

    // MARK: Building messages from the vectors' JSON form

    static func containsTag(_ value: JSONValue, _ predicate: (String, JSONValue) -> Bool) -> Bool {
        switch value {
        case .object(let members):
            if members.count == 1, let (key, inner) = members.elements.first, key.hasPrefix("$") { return predicate(key, inner) }
            return members.values.contains { containsTag($0, predicate) }
        case .array(let elements): return elements.contains { containsTag($0, predicate) }
        default: return false
        }
    }

    /// A vector value with its tags resolved to what the hub layer holds.
    static func untag(_ value: JSONValue) -> JSONValue {
        switch value {
        case .object(let members):
            if members.count == 1, let (key, inner) = members.elements.first, key.hasPrefix("$") {
                switch key {
                case "$float32", "$float64": return inner
                case "$timestamp", "$dateTimeOffset": return inner
                case "$bin": return .binary(Data(base64Encoded: inner.stringValue!)!)
                default: break
                }
            }
            return .object(members.mapValues(untag))
        case .array(let elements): return .array(elements.map(untag))
        default: return value
        }
    }

    static func hubMessage(_ json: JSONValue) -> HubMessage {
        var headers = HubHeaders()
        for (key, value) in json["headers"]?.objectValue ?? [:] { headers[key] = value.stringValue! }
        let id = json["invocationId"]?.stringValue
        switch json["type"]!.intValue! {
        case let type where type == 1 || type == 4:
            let invocation = HubInvocation(
                invocationId: id, target: json["target"]!.stringValue!,
                arguments: (json["arguments"]?.arrayValue ?? []).map(untag),
                streamIds: json["streamIds"]?.arrayValue?.map { $0.stringValue! } ?? [], headers: headers)
            return type == 1 ? .invocation(invocation) : .streamInvocation(invocation)
        case 2: return .streamItem(HubStreamItem(invocationId: id!, item: untag(json["item"]!), headers: headers))
        case 3:
            let outcome: HubCompletion.Outcome =
                if let error = json["error"]?.stringValue { .error(error) }
                else if let result = json["result"] { .result(untag(result)) }
                else { .void }
            return .completion(HubCompletion(invocationId: id!, outcome: outcome, headers: headers))
        case 5: return .cancelInvocation(HubCancelInvocation(invocationId: id!, headers: headers))
        case 6: return .ping
        case 7: return .close(HubClose(error: json["error"]?.stringValue, allowReconnect: json["allowReconnect"]?.boolValue ?? false))
        case 8: return .ack(sequenceId: Int64(json["sequenceId"]!.intValue!))
        default: return .sequence(sequenceId: Int64(json["sequenceId"]!.intValue!))
        }
    }
}

func bytes(hex: String) -> [UInt8] {
    var out: [UInt8] = []
    var iterator = hex.utf8.makeIterator()
    func nibble(_ c: UInt8) -> UInt8 { c <= 57 ? c - 48 : (c | 0x20) - 87 }
    while let high = iterator.next(), let low = iterator.next() { out.append(nibble(high) << 4 | nibble(low)) }
    return out
}

func hex(_ bytes: [UInt8]) -> String {
    bytes.map { String(format: "%02x", $0) }.joined()
}
