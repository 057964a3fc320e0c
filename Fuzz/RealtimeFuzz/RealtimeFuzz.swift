// Coverage-guided fuzz targets for every parser that reads bytes from the network (libFuzzer).
// Built and run by Scripts/fuzz.sh; not part of a normal build (Package.swift adds this target
// only when REALTIME_FUZZ is set). Each target checks more than "no crash": a value that decodes
// must encode and decode to itself, and a stream parser must give the same output whatever the
// chunking. A failed check traps, which libFuzzer reports with the input that caused it.

import Foundation
import OrderedCollections
@testable import RealtimeCore
@testable import SignalRHub
@testable import SocketIOEngine

/// Which target this process runs: REALTIME_FUZZ_TARGET (see `targets`).
let selected: String = ProcessInfo.processInfo.environment["REALTIME_FUZZ_TARGET"] ?? ""

let targets: [String: @Sendable (UnsafeRawBufferPointer) -> Void] = [
    "json": fuzzJSON,
    "msgpack": fuzzMessagePack,
    "signalr-json": { fuzzHubFraming($0, kind: .json) },
    "signalr-msgpack": { fuzzHubFraming($0, kind: .messagePack) },
    "signalr-handshake": fuzzHandshake,
    "signalr-negotiate": fuzzNegotiate,
    "sse": fuzzSSE,
    "engineio": fuzzEngineIO,
    "socketio": fuzzSocketIO,
    "hubvalue": fuzzHubValue,
]

let run: @Sendable (UnsafeRawBufferPointer) -> Void = {
    guard let body = targets[selected] else {
        FileHandle.standardError.write(Data("set REALTIME_FUZZ_TARGET to one of: \(targets.keys.sorted().joined(separator: ", "))\n".utf8))
        exit(2)
    }
    return body
}()

@_cdecl("LLVMFuzzerTestOneInput")
public func fuzzOne(_ data: UnsafePointer<UInt8>?, _ size: Int) -> CInt {
    run(UnsafeRawBufferPointer(start: data, count: size))
    return 0
}

func check(_ condition: @autoclosure () -> Bool, _ message: @autoclosure () -> String) {
    if !condition() { fatalError("fuzz check failed: \(message())") }
}

/// The input split in two at a point its first byte chooses (so chunk boundaries are fuzzed too).
func halves(_ input: UnsafeRawBufferPointer) -> (UnsafeRawBufferPointer, UnsafeRawBufferPointer) {
    guard input.count > 1 else { return (input, UnsafeRawBufferPointer(rebasing: input[input.count...])) }
    let cut = Int(input[0]) % input.count
    return (UnsafeRawBufferPointer(rebasing: input[..<cut]), UnsafeRawBufferPointer(rebasing: input[cut...]))
}

/// Equality of a decoded value and its round trip. A number too large for a Double reads as
/// infinity (as JavaScript's JSON.parse does) and is written as null (as JSON.stringify does).
func same(_ a: JSONValue, _ b: JSONValue) -> Bool {
    switch (a, b) {
    case (.number(let x), .null) where !x.isFinite: return true
    case (.number(let x), .number(let y)): return x == y || (x.isNaN && y.isNaN)
    case (.array(let x), .array(let y)): return x.count == y.count && zip(x, y).allSatisfy(same)
    case (.object(let x), .object(let y)):
        return x.count == y.count && zip(x, y).allSatisfy { $0.key == $1.key && same($0.value, $1.value) }
    default: return a == b
    }
}

/// Whether a number inside `value`, at any depth, satisfies `test`.
func containsNumber(_ value: JSONValue, where test: (Double) -> Bool) -> Bool {
    switch value {
    case .number(let x): return test(x)
    case .array(let items): return items.contains { containsNumber($0, where: test) }
    case .object(let members): return members.values.contains { containsNumber($0, where: test) }
    default: return false
    }
}

/// Whether a number too large for a Double (read as infinity) is inside: such a value is written
/// with null in its place, so its round trip differs by design.
func hasNonFinite(_ value: JSONValue) -> Bool { containsNumber(value) { !$0.isFinite } }

func hasNonFinite(_ message: HubMessage) -> Bool {
    switch message {
    case .invocation(let call), .streamInvocation(let call): return call.arguments.contains(where: hasNonFinite)
    case .streamItem(let item): return hasNonFinite(item.item)
    case .completion(let completion): if case .result(let value) = completion.outcome { return hasNonFinite(value) } else { return false }
    default: return false
    }
}

func fuzzJSON(_ input: UnsafeRawBufferPointer) {
    guard let value = try? JSONReader.parse(input) else { return }
    let bytes = JSONWriter.bytes(value)
    let again: JSONValue
    do { again = try bytes.withUnsafeBytes { raw throws(JSONParseError) in try JSONReader.parse(raw) } } catch {
        fatalError("fuzz check failed: our JSON of \(value) does not parse: \(error): \(String(decoding: bytes, as: UTF8.self))")
    }
    check(same(value, again), "JSON round trip changed \(value) into \(again)")
}

/// MessagePack equality up to the encoding chosen: the writer takes the smallest form, so a
/// non-negative `int` comes back as `uint`, and NaN is not equal to itself.
func same(_ a: MessagePackValue, _ b: MessagePackValue) -> Bool {
    switch (a, b) {
    case (.int(let x), .uint(let y)), (.uint(let y), .int(let x)): return x >= 0 && UInt64(x) == y
    case (.float(let x), .float(let y)): return x == y || (x.isNaN && y.isNaN)
    case (.double(let x), .double(let y)): return x == y || (x.isNaN && y.isNaN)
    case (.array(let x), .array(let y)): return x.count == y.count && zip(x, y).allSatisfy(same)
    case (.map(let x), .map(let y)):
        return x.count == y.count && zip(x, y).allSatisfy { same($0.key, $1.key) && same($0.value, $1.value) }
    default: return a == b
    }
}

func fuzzMessagePack(_ input: UnsafeRawBufferPointer) {
    guard let value = try? MessagePackReader.decode(Array(input)) else { return }
    let bytes = MessagePackWriter.encode(value)
    let again: MessagePackValue
    do { again = try MessagePackReader.decode(bytes) } catch {
        fatalError("fuzz check failed: our MessagePack of \(value) does not decode: \(error)")
    }
    check(same(value, again), "MessagePack round trip changed \(value) into \(again)")
    // The hub protocol's reader of the same bytes must not crash either.
    var reader = MessagePackReader(input)
    _ = try? reader.readJSONValue()
}

func fuzzHubFraming(_ input: UnsafeRawBufferPointer, kind: HubProtocolType) {
    let codec = HubProtocolCodec(kind, maximumMessageSize: 4096)
    var decoded: [HubMessage] = []
    var framer = HubMessageFramer(kind, maximumMessageSize: 4096)
    let (first, second) = halves(input)
    do {
        for chunk in [first, second] {
            try framer.consume(chunk) { (body) throws(HubProtocolError) in
                if let message = try? codec.decode(body: body) { decoded.append(message) }
            }
        }
    } catch {}
    // Every message that decoded must encode and decode to itself.
    for message in decoded where !hasNonFinite(message) {
        let encoded = codec.encode(message)
        var back: [HubMessage] = []
        var again = HubMessageFramer(kind, maximumMessageSize: 1 << 20)
        do {
            try again.consume(encoded) { (body) throws(HubProtocolError) in back.append(try codec.decode(body: body)) }
        } catch {
            fatalError("fuzz check failed: our encoding of \(message) does not decode: \(error)")
        }
        check(back.count == 1 && "\(back[0])" == "\(message)", "\(kind) round trip changed \(message) into \(back)")
    }
}

func fuzzHandshake(_ input: UnsafeRawBufferPointer) {
    let bytes = Array(input)
    if case .accepted(let consumed)? = try? HubHandshake.parseResponse(bytes) { check(consumed <= bytes.count, "consumed past the end") }
    if case .refused(_, let consumed)? = try? HubHandshake.parseResponse(bytes) { check(consumed <= bytes.count, "consumed past the end") }
    if let request = try? HubHandshake.parseRequest(bytes) { check(request.consumed <= bytes.count, "consumed past the end") }
}

func fuzzNegotiate(_ input: UnsafeRawBufferPointer) {
    _ = try? Negotiation.parse(Array(input), url: "http://127.0.0.1:1/hub?access_token=secret")
}

func fuzzSSE(_ input: UnsafeRawBufferPointer) {
    func parse(_ chunks: [UnsafeRawBufferPointer]) -> (outputs: [SSEParser.Output], id: String, retry: Int?, failed: Bool) {
        var parser = SSEParser(configuration: .init(maxEventSize: 512, emitsComments: true))
        var outputs: [SSEParser.Output] = []
        var failed = false
        do {
            for chunk in chunks { try parser.parse(bytes: chunk) { outputs.append($0) } }
        } catch { failed = true }
        return (outputs, parser.lastEventId, parser.reconnectionTime, failed)
    }
    let whole = parse([input])
    let (first, second) = halves(input)
    let split = parse([first, second])
    var bytewise: [UnsafeRawBufferPointer] = []
    for index in 0..<input.count { bytewise.append(UnsafeRawBufferPointer(rebasing: input[index..<index + 1])) }
    let single = parse(bytewise)
    check(whole.failed == split.failed && whole.failed == single.failed, "SSE failure depends on chunking: whole \(whole.failed), split \(split.failed), byte by byte \(single.failed)")
    guard !whole.failed else { return }
    check(whole.outputs == split.outputs, "SSE output depends on chunking (split): \(whole.outputs) vs \(split.outputs)")
    check(whole.outputs == single.outputs, "SSE output depends on chunking (byte by byte): \(whole.outputs) vs \(single.outputs)")
    check(whole.id == split.id && whole.id == single.id, "SSE last event id depends on chunking")
    check(whole.retry == split.retry && whole.retry == single.retry, "SSE retry depends on chunking")
}

func fuzzEngineIO(_ input: UnsafeRawBufferPointer) {
    if let packets = try? EngineIOCodec.decodePayload(input) {
        // A payload that decodes must encode and decode to the same packets.
        let text = EngineIOCodec.encodePayload(packets)
        guard let again = try? EngineIOCodec.decodePayload(text) else { fatalError("fuzz check failed: our payload of \(packets) does not decode: \(text)") }
        check(again == packets, "Engine.IO payload round trip changed \(packets) into \(again)")
    }
    _ = try? EngineIOCodec.decode(bytes: input)
}

func fuzzSocketIO(_ input: UnsafeRawBufferPointer) {
    guard let (packet, attachments) = try? SocketIOCodec.decode(bytes: input) else { return }
    check(attachments >= 0, "negative attachment count")
    var decoder = SocketIOPacketDecoder()
    _ = try? decoder.receive(text: String(decoding: input, as: UTF8.self))
    guard attachments == 0, packet.type != .binaryEvent, packet.type != .binaryAck, !(packet.data.map(hasNonFinite) ?? false) else { return }
    let encoded = SocketIOCodec.encode(packet)
    guard let again = try? SocketIOCodec.decode(text: encoded.text) else { fatalError("fuzz check failed: our encoding of \(packet) does not decode: \(encoded.text)") }
    check("\(again.packet)" == "\(packet)", "Socket.IO round trip changed \(packet) into \(again.packet)")
}

// MARK: Typed values: HubValueDecoder and HubValueEncoder against JSONDecoder and JSONEncoder

struct FuzzInner: Codable, Equatable {
    var name: String
    var tags: [String]
    var score: Double?
}

enum FuzzShape: Codable, Equatable {
    case circle(radius: Double)
    case square(Int)
}

/// The value as `T` both ways: both fail, or both give the same value; then that value encodes
/// the same both ways (JSONEncoder's text read back; binary compared as its base64 text). Which
/// error and where is not compared (a wide object's first failing member depends on a
/// Dictionary's order in JSONDecoder).
func agreeAsTyped<T: Codable & Equatable>(_ value: JSONValue, _ type: T.Type) {
    let direct = try? HubValueDecoder.decode(T.self, from: value)
    let throughText = try? HubValueCoding.decodeThroughJSONText(value, as: T.self)
    check(direct == throughText, "decoding \(value.jsonString) as \(T.self): \(String(describing: direct)) vs \(String(describing: throughText))")
    guard let decoded = direct else { return }
    let encoded = try? HubValueEncoder.encode(decoded).base64EncodingBinary()
    let encodedThroughText = try? HubValueCoding.encodeThroughJSONText(decoded)
    check(encoded == encodedThroughText, "encoding \(decoded): \(encoded?.jsonString ?? "error") vs \(encodedThroughText?.jsonString ?? "error")")
}

/// Whether a whole number beyond 2^53 is inside. A `JSONValue` holds numbers as Doubles, so such a
/// number is already rounded when read; `HubValueDecoder` then gives the Double's exact integer,
/// `JSONDecoder` the integer of the shortest text that names the Double (1.111211111111111e+19 as
/// UInt64: 11112111111111110656 against 11112111111111110000). Neither is the sender's number: a
/// documented limit (Sources/SignalRHub/SignalRHub.docc/SignalRGuide.md, "Known gaps"), not a disagreement to report.
func hasWideInteger(_ value: JSONValue) -> Bool {
    containsNumber(value) { $0.rounded() == $0 && abs($0) >= 9_007_199_254_740_992 }
}

func fuzzHubValue(_ input: UnsafeRawBufferPointer) {
    guard let value = try? JSONReader.parse(input), !hasNonFinite(value), !hasWideInteger(value) else { return }
    agreeAsTyped(value, FuzzInner.self)
    agreeAsTyped(value, [Int].self)
    agreeAsTyped(value, [Int8?].self)
    agreeAsTyped(value, [UInt64].self)
    agreeAsTyped(value, [String: Double].self)
    agreeAsTyped(value, [Int: Bool].self)
    agreeAsTyped(value, [Float].self)
    agreeAsTyped(value, [Data].self)
    agreeAsTyped(value, [Date].self)
    agreeAsTyped(value, Decimal.self)
    agreeAsTyped(value, [FuzzShape].self)
    agreeAsTyped(value, [String: FuzzInner].self)
}
