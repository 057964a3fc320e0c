import Foundation
import RealtimeCore
import RealtimeTesting
@testable import SignalRHub
import Testing

/// The MessagePack codec itself (https://github.com/msgpack/msgpack/blob/master/spec.md): every
/// format family, bounded nesting, lengths checked before allocating, typed errors on any input.
/// The hub reads values straight into `JSONValue` (`readJSONValue`); every test also checks that it
/// agrees with reading a `MessagePackValue` and converting it, the way values were read before.
@Suite("MessagePack codec")
struct MessagePackCodecTests {
    struct Case: Sendable, CustomTestStringConvertible {
        let family: String
        let hex: String
        let value: MessagePackValue
        var testDescription: String { family }
    }

    static let families: [Case] = [
        Case(family: "positive fixint", hex: "05", value: .int(5)),
        Case(family: "negative fixint", hex: "ff", value: .int(-1)),
        Case(family: "nil", hex: "c0", value: .nil),
        Case(family: "false", hex: "c2", value: .bool(false)),
        Case(family: "true", hex: "c3", value: .bool(true)),
        Case(family: "uint 8", hex: "ccff", value: .uint(255)),
        Case(family: "uint 16", hex: "cd0100", value: .uint(256)),
        Case(family: "uint 32", hex: "ce00010000", value: .uint(65_536)),
        Case(family: "uint 64", hex: "cf0000000100000000", value: .uint(4_294_967_296)),
        Case(family: "int 8", hex: "d080", value: .int(-128)),
        Case(family: "int 16", hex: "d1ff7f", value: .int(-129)),
        Case(family: "int 32", hex: "d2ffff7fff", value: .int(-32_769)),
        Case(family: "int 64", hex: "d3ffffffff7fffffff", value: .int(-2_147_483_649)),
        Case(family: "float 32", hex: "ca3fc00000", value: .float(1.5)),
        Case(family: "float 64", hex: "cb3ff8000000000000", value: .double(1.5)),
        Case(family: "fixstr", hex: "a3616263", value: .string("abc")),
        Case(family: "str 8", hex: "d903616263", value: .string("abc")),
        Case(family: "str 16", hex: "da0003616263", value: .string("abc")),
        Case(family: "str 32", hex: "db00000003616263", value: .string("abc")),
        Case(family: "str, multi-byte UTF-8", hex: "a5c3a9e282ac", value: .string("é€")),
        Case(family: "bin 8", hex: "c4020102", value: .binary([1, 2])),
        Case(family: "bin 16", hex: "c500020102", value: .binary([1, 2])),
        Case(family: "bin 32", hex: "c6000000020102", value: .binary([1, 2])),
        Case(family: "fixarray", hex: "920102", value: .array([.int(1), .int(2)])),
        Case(family: "array 16", hex: "dc00020102", value: .array([.int(1), .int(2)])),
        Case(family: "array 32", hex: "dd000000020102", value: .array([.int(1), .int(2)])),
        Case(family: "fixmap", hex: "81a16101", value: .map([MessagePackPair(.string("a"), .int(1))])),
        Case(family: "map 16", hex: "de0001a16101", value: .map([MessagePackPair(.string("a"), .int(1))])),
        Case(family: "map 32", hex: "df00000001a16101", value: .map([MessagePackPair(.string("a"), .int(1))])),
        Case(family: "map with a non-string key and a repeated key", hex: "8301a178a161c2a161c3",
             value: .map([MessagePackPair(.int(1), .string("x")), MessagePackPair(.string("a"), .bool(false)),
                          MessagePackPair(.string("a"), .bool(true))])),
        Case(family: "fixext 1", hex: "d405aa", value: .ext(type: 5, data: [0xaa])),
        Case(family: "fixext 2", hex: "d505aabb", value: .ext(type: 5, data: [0xaa, 0xbb])),
        Case(family: "fixext 4", hex: "d60501020304", value: .ext(type: 5, data: [1, 2, 3, 4])),
        Case(family: "fixext 8", hex: "d7050102030405060708", value: .ext(type: 5, data: [1, 2, 3, 4, 5, 6, 7, 8])),
        Case(family: "fixext 16", hex: "d805" + String(repeating: "01", count: 16), value: .ext(type: 5, data: Array(repeating: 1, count: 16))),
        Case(family: "ext 8", hex: "c70305aabbcc", value: .ext(type: 5, data: [0xaa, 0xbb, 0xcc])),
        Case(family: "ext 16", hex: "c8000305aabbcc", value: .ext(type: 5, data: [0xaa, 0xbb, 0xcc])),
        Case(family: "ext 32", hex: "c90000000305aabbcc", value: .ext(type: 5, data: [0xaa, 0xbb, 0xcc])),
        Case(family: "timestamp 32", hex: "d6ff00000001", value: .ext(type: -1, data: [0, 0, 0, 1])),
    ]

    @Test("Every format family reads to its value, and straight into JSONValue the same", arguments: families)
    func readsEachFamily(_ entry: Case) throws {
        let input = bytes(hex: entry.hex)
        let (value, consumed) = try Self.read(input)
        #expect(value == entry.value)
        #expect(consumed == input.count)
        let (json, jsonConsumed) = try Self.readJSON(input)
        #expect(Self.same(json, MessagePackHubProtocol.jsonValue(entry.value)), "\(json)")
        #expect(jsonConsumed == input.count)
    }

    @Test("What JSONValue makes of each kind of value")
    func jsonValueShapes() throws {
        #expect(try Self.readJSON(bytes(hex: "cf0000000100000000")).0 == .number(4_294_967_296))
        #expect(try Self.readJSON(bytes(hex: "c4020102")).0 == .binary(Data([1, 2])))
        #expect(try Self.readJSON(bytes(hex: "d6ff00000001")).0 == .string("1970-01-01T00:00:01Z"))
        #expect(try Self.readJSON(bytes(hex: "d405aa")).0 == .binary(Data([0xaa])))
        // A non-string key becomes its JSON text; a repeated key keeps its first place and its last value.
        let object = try Self.readJSON(bytes(hex: "8301a178a161c2a161c3")).0
        #expect(object.jsonString == #"{"1":"x","a":true}"#)
    }

    /// int 64 and uint 64 at their edges read into `JSONValue` exactly (not through a `Double`), and
    /// write back to the same value.
    @Test("64-bit integers read and write exactly", arguments: [
        ("cfffffffffffffffff", JSONValue.unsignedInteger(.max)),
        ("cf8000000000000000", .unsignedInteger(9_223_372_036_854_775_808)),
        ("cf7fffffffffffffff", .integer(.max)),
        ("cf0020000000000001", .integer(9_007_199_254_740_993)),
        ("d38000000000000000", .integer(.min)),
        ("d3ffdfffffffffffff", .integer(-9_007_199_254_740_993)),
    ])
    func sixtyFourBitIntegersAreExact(_ hex: String, _ expected: JSONValue) throws {
        let (json, _) = try Self.readJSON(bytes(hex: hex))
        #expect(Self.caseName(json) == Self.caseName(expected), "the exact case, not a double")
        #expect(json.jsonString == expected.jsonString)
        var writer = MessagePackWriter()
        MessagePackHubProtocol.writeValue(json, into: &writer)
        let (again, _) = try Self.readJSON(writer.bytes)
        #expect(Self.caseName(again) == Self.caseName(expected))
        #expect(again == expected)
    }

    /// A Double is written as a float 64 whether or not it is whole, so a hub method that takes a
    /// `double` gets 2.0 and -0.0 as doubles, as over JSON (`2.0`), never as the integers 2 and 0.
    @Test("Doubles stay float 64, whole or not", arguments: [
        (2.0, "cb4000000000000000"),
        (-0.0, "cb8000000000000000"),
        (0.0, "cb0000000000000000"),
        (1e15, "cb430c6bf526340000"),
        (1.5, "cb3ff8000000000000"),
    ])
    func doublesStayDoubles(_ number: Double, _ hex: String) throws {
        var writer = MessagePackWriter()
        MessagePackHubProtocol.writeValue(.number(number), into: &writer)
        #expect(writer.bytes == bytes(hex: hex))
        let (again, _) = try Self.readJSON(writer.bytes)
        #expect(Self.caseName(again) == "number")
        guard case .number(let read) = again else { return }
        #expect(read.bitPattern == number.bitPattern, "the same double, its sign included")
    }

    static func caseName(_ value: JSONValue) -> String? { Mirror(reflecting: value).children.first?.label }

    @Test("Every strict prefix of every family is truncated, at the same offset both ways", arguments: families)
    func prefixesAreTruncated(_ entry: Case) {
        let input = bytes(hex: entry.hex)
        for length in 0..<input.count {
            let prefix = Array(input.prefix(length))
            let error = #expect(throws: MessagePackError.self) { _ = try Self.read(prefix) }
            #expect(error?.kind == .truncated, "\(entry.family), \(length) bytes")
            let jsonError = #expect(throws: MessagePackError.self) { _ = try Self.readJSON(prefix) }
            #expect(jsonError == error)
        }
    }

    @Test("0xc1 is never used, and invalid UTF-8 in a str is refused")
    func invalidBytes() {
        for hex in ["c1", "91c1", "a2c328"] {
            let error = #expect(throws: MessagePackError.self) { _ = try Self.read(bytes(hex: hex)) }
            #expect(error?.kind == (hex == "a2c328" ? .invalidUTF8 : .invalidFormat), "\(hex)")
            let jsonError = #expect(throws: MessagePackError.self) { _ = try Self.readJSON(bytes(hex: hex)) }
            #expect(jsonError == error)
        }
    }

    @Test("Nesting: 100 levels of arrays or maps read, 101 are tooDeep")
    func nesting() throws {
        for opener: [UInt8] in [[0x91], [0x81, 0xa1, 0x6b]] {
            let allowed = Array(Array(repeating: opener, count: MessagePackReader.maxDepth).joined()) + [0xc0]
            _ = try Self.read(allowed)
            _ = try Self.readJSON(allowed)
            let deeper = Array(Array(repeating: opener, count: MessagePackReader.maxDepth + 1).joined()) + [0xc0]
            let error = #expect(throws: MessagePackError.self) { _ = try Self.read(deeper) }
            #expect(error?.kind == .tooDeep)
            let jsonError = #expect(throws: MessagePackError.self) { _ = try Self.readJSON(deeper) }
            #expect(jsonError?.kind == .tooDeep)
        }
    }

    /// A non-str key becomes its JSON text, so a map used as a key inside a map used as a key is
    /// escaped once per level: 30 such levels in 90 bytes made 2^30 backslashes (found by
    /// Scripts/fuzz.sh: a 115-byte input asked for 8 GB). Arrays and maps are refused as keys by
    /// both readers; scalar keys (numbers, nil, booleans, bin, ext) stay within a few times their size.
    @Test("An array or map as a map key is refused by both readers, before any key text is built")
    func containerKeysAreRefused() throws {
        var chain: [UInt8] = [0xc0]
        for _ in 0..<30 { chain = [0x81] + [0x81, 0xa1, 0x22] + chain + [0xc0] } // {{"\"": chain}: nil}
        let fuzzed = bytes(hex: "82930181a1716b8291919101000000919193933d93922c90c3" + String(repeating: "81", count: 34) + "65696e666f2f0d050d0d290d0d0d040d0d0d0d0d030d0d0d0d0d0d835b01000d0d0d2f7a6f6e030d0d0d0d0d0d835b010000940d0d0d0d0d")
        for (name, input) in [("a map key", bytes(hex: "81" + "81a16101" + "c0")), ("an array key", bytes(hex: "81" + "9101" + "c0")),
                              ("30 nested map keys", chain)] {
            let error = #expect(throws: MessagePackError.self, "\(name)") { _ = try Self.read(input) }
            #expect(error?.kind == .unexpectedType, "\(name)")
            let jsonError = #expect(throws: MessagePackError.self, "\(name)") { _ = try Self.readJSON(input) }
            #expect(jsonError == error, "\(name)")
        }
        #expect(throws: MessagePackError.self) { _ = try Self.readJSON(fuzzed) }
        // Scalar keys of every kind still read, each as its JSON text (bin as JSONValue writes
        // binary: Node's Buffer form, a few bytes of text per byte).
        let scalars = try Self.readJSON(bytes(hex: "86" + "c0a16e" + "c3a174" + "cb3ff8000000000000a164" + "d0ffa169" + "c40101a162" + "d6ff00000001a173")).0
        #expect(scalars.jsonString == #"{"null":"n","true":"t","1.5":"d","-1":"i","{\"type\":\"Buffer\",\"data\":[1]}":"b","\"1970-01-01T00:00:01Z\"":"s"}"#)
    }

    @Test("A length claiming 4 GB with a few bytes behind it is truncated at once (nothing allocated for it)")
    func hugeLengths() {
        for hex in ["dbffffffff616263", "c6ffffffff0102", "ddffffffff0102", "dfffffffff0102", "c9ffffffff05aa"] {
            let error = #expect(throws: MessagePackError.self) { _ = try Self.read(bytes(hex: hex)) }
            #expect(error?.kind == .truncated, "\(hex)")
            let jsonError = #expect(throws: MessagePackError.self) { _ = try Self.readJSON(bytes(hex: hex)) }
            #expect(jsonError == error)
        }
    }

    /// 30,000 seeded random inputs: random bytes drawn mostly from format bytes and small lengths,
    /// and mutations (a byte changed, cut, or doubled) of the conformance bodies. Nothing crashes,
    /// each read ends with a value or a typed error, and both readers agree on which, where they
    /// stopped, and the value.
    @Test("Random and mutated inputs: typed errors only, and both readers agree")
    func randomInputs() throws {
        var random = SplitMix64(seed: 0x5169_6e61_6c52)
        let interesting: [UInt8] = [0x00, 0x01, 0x7f, 0x80, 0x81, 0x8f, 0x90, 0x91, 0x9f, 0xa0, 0xa1, 0xbf, 0xc0, 0xc1, 0xc2, 0xc3,
                                    0xc4, 0xc5, 0xc6, 0xc7, 0xc8, 0xc9, 0xca, 0xcb, 0xcc, 0xcd, 0xce, 0xcf, 0xd0, 0xd3, 0xd4, 0xd6,
                                    0xd8, 0xd9, 0xda, 0xdb, 0xdc, 0xdd, 0xde, 0xdf, 0xe0, 0xff]
        let bodies = SignalRConformanceTests.messagePackEntries.compactMap { $0["bodyHex"]?.stringValue }.map(bytes(hex:))
        var values = 0
        var errors: [MessagePackError.Kind: Int] = [:]
        for round in 0..<30_000 {
            var input: [UInt8]
            if round % 2 == 0 || bodies.isEmpty {
                input = (0..<Int(random.next() % 48)).map { _ in
                    random.next() % 3 == 0 ? UInt8(truncatingIfNeeded: random.next()) : interesting[Int(random.next() % UInt64(interesting.count))]
                }
            } else {
                input = bodies[Int(random.next() % UInt64(bodies.count))]
                let at = input.isEmpty ? 0 : Int(random.next() % UInt64(input.count))
                switch random.next() % 3 {
                case 0: if !input.isEmpty { input[at] = UInt8(truncatingIfNeeded: random.next()) }
                case 1: input = Array(input.prefix(at))
                default: input.insert(input.isEmpty ? 0xc0 : input[at], at: at)
                }
                // The hub reader sees the same bytes: a message or a typed error.
                _ = try? input.withUnsafeBytes { try MessagePackHubProtocol.parse($0) }
            }
            let plain = Result { () throws(MessagePackError) in try Self.read(input) }
            let json = Result { () throws(MessagePackError) in try Self.readJSON(input) }
            switch (plain, json) {
            case (.success(let (value, consumed)), .success(let (jsonValue, jsonConsumed))):
                values += 1
                #expect(consumed == jsonConsumed)
                #expect(Self.same(jsonValue, MessagePackHubProtocol.jsonValue(value)), "\(input)")
            case (.failure(let error), .failure(let jsonError)):
                errors[error.kind, default: 0] += 1
                #expect(error == jsonError, "\(input)")
            default:
                Issue.record("the readers disagree on \(input): \(plain) / \(json)")
            }
        }
        // The generator reaches both outcomes and several kinds of error (it is not testing nothing).
        #expect(values > 1_000)
        #expect(errors.count >= 3, "\(errors)")
    }

    // MARK: Helpers

    static func read(_ bytes: [UInt8]) throws(MessagePackError) -> (MessagePackValue, Int) {
        let result = bytes.withUnsafeBytes { raw -> Result<(MessagePackValue, Int), MessagePackError> in
            var reader = MessagePackReader(raw)
            return Result { () throws(MessagePackError) in (try reader.read(), reader.index) }
        }
        return try result.get()
    }

    static func readJSON(_ bytes: [UInt8]) throws(MessagePackError) -> (JSONValue, Int) {
        let result = bytes.withUnsafeBytes { raw -> Result<(JSONValue, Int), MessagePackError> in
            var reader = MessagePackReader(raw)
            return Result { () throws(MessagePackError) in (try reader.readJSONValue(), reader.index) }
        }
        return try result.get()
    }

    /// Equal, or equal but for NaN (which is not equal to itself).
    static func same(_ a: JSONValue, _ b: JSONValue) -> Bool {
        a == b || String(reflecting: a) == String(reflecting: b)
    }
}
