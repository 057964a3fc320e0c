@testable import RealtimeCore
import Testing

/// The UTF-8 check the WebSocket reader and the Engine.IO payload decoder share, held to the
/// standard library's own validation: the edges of every sequence length, the forms RFC 3629
/// forbids, text cut anywhere, and random bytes.
@Suite struct UTF8CheckTests {
    static func check(_ bytes: [UInt8]) -> Bool { bytes.withUnsafeBytes { isValidUTF8($0) } }
    static func standard(_ bytes: [UInt8]) -> Bool { String(validating: bytes, as: UTF8.self) != nil }

    static let cases: [(String, [UInt8], Bool)] = [
        ("empty", [], true),
        ("ASCII, more than eight bytes", Array("42[\"tick\",12345]".utf8), true),
        ("U+0080, the first two-byte scalar", [0xC2, 0x80], true),
        ("U+07FF, the last two-byte scalar", [0xDF, 0xBF], true),
        ("U+0800, the first three-byte scalar", [0xE0, 0xA0, 0x80], true),
        ("U+FFFF", [0xEF, 0xBF, 0xBF], true),
        ("U+10000, the first four-byte scalar", [0xF0, 0x90, 0x80, 0x80], true),
        ("U+10FFFF, the last scalar", [0xF4, 0x8F, 0xBF, 0xBF], true),
        ("text after eight ASCII bytes", Array("abcdefgh".utf8) + [0xC3, 0xA9], true),
        ("an overlong two-byte slash", [0xC0, 0xAF], false),
        ("an overlong three-byte form", [0xE0, 0x80, 0xAF], false),
        ("an overlong four-byte form", [0xF0, 0x80, 0x80, 0xAF], false),
        ("an encoded surrogate", [0xED, 0xA0, 0x80], false),
        ("past U+10FFFF", [0xF4, 0x90, 0x80, 0x80], false),
        ("a lone continuation byte", [0x80], false),
        ("a four-byte sequence cut short", [0xF0, 0x9F, 0x98], false),
        ("a leading byte that never starts a sequence", [0xFF], false),
        ("a bad byte after eight ASCII bytes", Array("abcdefgh".utf8) + [0xFE], false),
    ]

    @Test(arguments: cases)
    func agreesWithTheStandardLibrary(_ entry: (String, [UInt8], Bool)) {
        #expect(Self.check(entry.1) == entry.2, "\(entry.0)")
        #expect(Self.standard(entry.1) == entry.2, "\(entry.0): the expectation itself")
    }

    @Test func textCutAnywhereAgrees() {
        let text = Array("é ✓ 😀 abcdefghij ü".utf8)
        for end in 0...text.count {
            let prefix = Array(text[..<end])
            #expect(Self.check(prefix) == Self.standard(prefix), "cut at \(end)")
        }
    }

    @Test func randomBytesAgree() {
        var generator = SystemRandomNumberGenerator()
        for _ in 0..<20_000 {
            let count = Int.random(in: 0...24, using: &generator)
            // Mostly ASCII with a few high bytes, so that valid sequences occur as well.
            let bytes = (0..<count).map { _ in
                Bool.random(using: &generator) ? UInt8.random(in: 0x20...0x7E, using: &generator) : UInt8.random(in: 0x80...0xF5, using: &generator)
            }
            #expect(Self.check(bytes) == Self.standard(bytes), "\(bytes)")
        }
    }
}
