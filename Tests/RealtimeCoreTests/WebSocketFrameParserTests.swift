import NIOCore
import NIOWebSocket
@testable import RealtimeCore
import Testing

/// The server's bytes cut into frames however the reads split them: every split of a stream of
/// frames with 7-, 16- and 64-bit lengths, a control frame between fragments and an empty frame
/// gives the same frames, payloads intact.
@Suite struct WebSocketFrameParserTests {
    static let stream: [UInt8] = [0x01, 2, 0x68, 0x65]  // text "he", not final
        + [0x89, 1, 0x21]  // ping "!"
        + [0x80, 3, 0x6C, 0x6C, 0x6F]  // continuation "llo", final
        + [0x82, 126, 0x01, 0x00] + (0..<256).map { UInt8($0) }  // binary, 16-bit length
        + [0x81, 127, 0, 0, 0, 0, 0, 0x01, 0x00, 0x00] + Array(repeating: 0x7A, count: 65_536)  // text, 64-bit length
        + [0x81, 0]  // empty text
        + [0x88, 2, 0x03, 0xE8]  // close 1000

    struct Cut: Equatable, CustomStringConvertible {
        let fin: Bool
        let opcode: WebSocketOpcode
        let payload: [UInt8]
        var description: String { "\(opcode) fin \(fin), \(payload.count) bytes" }
    }

    static func frames(in stream: [UInt8], reads: [Int]) throws -> [Cut] {
        var parser = WebSocketFrameParser(maxFrameSize: 1 << 20)
        var cuts: [Cut] = []
        var start = 0
        for end in reads + [stream.count] where end > start {
            var bytes = parser.take(ByteBuffer(bytes: stream[start..<end]))
            while let frame = try parser.nextFrame(&bytes) {
                cuts.append(Cut(fin: frame.fin, opcode: frame.opcode, payload: Array(frame.data.readableBytesView)))
            }
            parser.keep(bytes)
            start = end
        }
        return cuts
    }

    @Test func aStreamReadWholeGivesEveryFrame() throws {
        let cuts = try Self.frames(in: Self.stream, reads: [])
        #expect(cuts.map(\.opcode) == [.text, .ping, .continuation, .binary, .text, .text, .connectionClose])
        #expect(cuts.map(\.fin) == [false, true, true, true, true, true, true])
        #expect(cuts[3].payload == (0..<256).map { UInt8($0) })
        #expect(cuts[4].payload.count == 65_536)
        #expect(cuts[5].payload.isEmpty)
    }

    /// A parser that checks text tells, for a text frame that is a whole message, whether its
    /// UTF-8 is valid, checked with the header; it leaves fragments, other opcodes and, when it
    /// does not check, every frame to the message assembler.
    @Test func aWholeTextFramesUTF8IsCheckedWithItsHeader() throws {
        let valid: [UInt8] = Array("héllo €".utf8)
        let invalid: [UInt8] = [0x68, 0xC3, 0x28]  // a two-byte sequence cut by "("
        let stream: [UInt8] = [0x81, UInt8(valid.count)] + valid
            + [0x81, UInt8(invalid.count)] + invalid
            + [0x01, UInt8(invalid.count)] + invalid  // a first fragment: not a whole message
            + [0x82, UInt8(invalid.count)] + invalid  // binary
            + [0x81, 0]  // empty text
        for checks in [true, false] {
            var parser = WebSocketFrameParser(maxFrameSize: 1 << 20, checksText: checks)
            var bytes = parser.take(ByteBuffer(bytes: stream))
            var results: [Bool?] = []
            while let frame = try parser.nextFrame(&bytes) { results.append(frame.validText) }
            #expect(results == (checks ? [true, false, nil, nil, true] : [nil, nil, nil, nil, nil]))
        }
    }

    /// Two reads, cut at every byte of the stream's first 300 bytes and of the long frame's
    /// header, and a read per byte.
    @Test func everySplitGivesTheSameFrames() throws {
        let whole = try Self.frames(in: Self.stream, reads: [])
        let longHeader = 4 + 3 + 5 + 4 + 256
        for cut in Array(1..<300) + Array(longHeader..<(longHeader + 12)) {
            #expect(try Self.frames(in: Self.stream, reads: [cut]) == whole, "cut at \(cut)")
        }
        let short = Array(Self.stream.prefix(longHeader)) + [0x88, 0]
        #expect(try Self.frames(in: short, reads: Array(1..<short.count)).count == 5)
    }

    /// What is kept between reads is the frame not yet whole, in a buffer sized for that frame:
    /// not the read it came in (whose messages a consumer may still hold), and not the bytes read
    /// before it. Reads that each end inside a frame, many in a row, keep no more than a frame.
    @Test func betweenReadsOnlyTheUnfinishedFrameIsKept() throws {
        var parser = WebSocketFrameParser(maxFrameSize: 1 << 20)
        let frame: [UInt8] = [0x82, 126, 0x03, 0xE8] + Array(repeating: 0x61, count: 1000)  // binary, 1,000 bytes
        let stream = Array([[UInt8]](repeating: frame, count: 50).joined())
        var payloads: [ByteBuffer] = []
        var start = 0
        for end in stride(from: 700, through: stream.count, by: 700) + [stream.count] where end > start {
            var bytes = parser.take(ByteBuffer(bytes: stream[start..<end]))
            while let cut = try parser.nextFrame(&bytes) { payloads.append(cut.data) }
            parser.keep(bytes)
            // ByteBuffer rounds its room up to a power of two.
            if let kept = parser.keptCapacity { #expect(kept < 2 * frame.count, "after byte \(end): room for \(kept) bytes kept") }
            start = end
        }
        #expect(payloads.count == 50)
        #expect(payloads.allSatisfy { $0.readableBytesView.elementsEqual(frame[4...]) })
        #expect(parser.keptCapacity == nil)
    }

    /// A frame over many reads is copied into the parser's own buffer once, and the reads after
    /// are appended to it in place (a copy per read would copy the frame over and over).
    @Test func aFrameOverManyReadsIsCopiedOnce() throws {
        var parser = WebSocketFrameParser(maxFrameSize: 1 << 20)
        let payload = (0..<10_000).map { UInt8(truncatingIfNeeded: $0) }
        let stream: [UInt8] = [0x81, 1, 0x61] + [0x82, 126, 0x27, 0x10] + payload  // text "a", then binary of 10,000 bytes
        var cuts: [ByteBuffer] = []
        for start in stride(from: 0, to: stream.count, by: 100) {
            var bytes = parser.take(ByteBuffer(bytes: stream[start..<min(start + 100, stream.count)]))
            while let frame = try parser.nextFrame(&bytes) { cuts.append(frame.data) }
            parser.keep(bytes)
        }
        #expect(cuts.count == 2)
        #expect(cuts.last.map { Array($0.readableBytesView) } == payload)
        #expect(parser.keptCopies == 1)
    }

    @Test func aFrameOverTheLimitIsRefusedFromItsHeader() throws {
        var parser = WebSocketFrameParser(maxFrameSize: 125)
        var bytes = parser.take(ByteBuffer(bytes: [0x82, 126, 0x00, 200]))
        #expect(throws: RealtimeError.self) { try parser.nextFrame(&bytes) }
        do {
            _ = try parser.nextFrame(&bytes)
        } catch {
            #expect(error.code == .messageTooLarge)
            #expect(error.closeCode == 1009)
        }
    }
}
