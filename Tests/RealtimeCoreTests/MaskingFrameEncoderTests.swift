import NIOCore
import NIOEmbedded
import NIOHTTP1
import NIOWebSocket
@testable import RealtimeCore
import Testing

/// Our client frame encoder writes exactly the bytes swift-nio's encoder writes, for every length
/// class of the header and every alignment of the eight-byte masking loop.
@Suite struct MaskingFrameEncoderTests {
    static let key: WebSocketMaskingKey = [0x12, 0x9A, 0xF0, 0x07]

    func encoded(_ frame: WebSocketFrame, ours: Bool) throws -> [UInt8] {
        let channel = EmbeddedChannel()
        if ours {
            try channel.pipeline.syncOperations.addHandler(MaskingFrameEncoder())
        } else {
            try channel.pipeline.syncOperations.addHandler(WebSocketFrameEncoder())
        }
        try channel.writeOutbound(frame)
        var bytes: [UInt8] = []
        while var buffer = try channel.readOutbound(as: ByteBuffer.self) {
            bytes += buffer.readBytes(length: buffer.readableBytes) ?? []
        }
        _ = try channel.finish()
        return bytes
    }

    @Test(arguments: [0, 1, 3, 7, 8, 9, 17, 125, 126, 127, 4095, 65535, 65536, 70001])
    func matchesSwiftNIOsEncoder(length: Int) throws {
        let payload = ByteBuffer(bytes: (0..<length).map { UInt8(truncatingIfNeeded: $0 &* 31 &+ 7) })
        for opcode in [WebSocketOpcode.text, .binary, .continuation, .connectionClose] {
            for fin in [true, false] {
                let frame = WebSocketFrame(fin: fin, rsv1: opcode == .text, opcode: opcode, maskKey: Self.key, data: payload)
                #expect(try encoded(frame, ours: true) == encoded(frame, ours: false))
            }
        }
        let unmasked = WebSocketFrame(fin: true, opcode: .binary, data: payload)
        #expect(try encoded(unmasked, ours: true) == encoded(unmasked, ours: false))
        // The loop writer's frames, encoded without a frame value straight into its batch buffer.
        for opcode in [WebSocketOpcode.text, .binary] {
            var direct = ByteBuffer(bytes: [0xEE])
            payload.withUnsafeReadableBytes { MaskingFrameEncoder.writeMaskedFrame(opcode: opcode, payload: $0, key: Self.key, into: &direct) }
            #expect(direct.readInteger(as: UInt8.self) == 0xEE, "appended after what the buffer held")
            #expect(direct.readableBytes == MaskingFrameEncoder.maskedFrameSize(payload: length))
            let frame = WebSocketFrame(fin: true, opcode: opcode, maskKey: Self.key, data: payload)
            #expect(try Array(direct.readableBytesView) == encoded(frame, ours: false))
        }
    }

    @Test(arguments: 0..<4)
    func maskingAtAnyKeyOffsetMatchesTheByteLoop(offset: Int) {
        for length in [0, 1, 5, 8, 13, 64, 1000] {
            var fast = ByteBuffer(bytes: (0..<length).map { UInt8(truncatingIfNeeded: $0) })
            var slow = fast
            fast.maskFast(Self.key, offset: offset)
            slow.webSocketMask(Self.key, indexOffset: offset)
            #expect(fast == slow)
        }
    }

    /// The writers' key source hands out unpredictable keys past its pool's refills: 1,000 keys
    /// (15 refills of 64) are practically all different (two equal among 1,000 random 32-bit keys:
    /// about one chance in 10,000), and no key repeats its predecessor.
    @Test func maskingKeysDifferAcrossRefills() {
        var source = MaskingKeySource()
        var keys: [[UInt8]] = []
        for _ in 0..<1000 { keys.append(Array(source.next())) }
        #expect(Set(keys).count >= 999)
        #expect(zip(keys, keys.dropFirst()).allSatisfy { $0 != $1 })
    }

    @Test func theUpgraderChecksTheAcceptKey() {
        // RFC 6455 section 1.3's example.
        let upgrader = WebSocketClientUpgrader<Void>(maxFrameSize: 1 << 20, requestKey: "dGhlIHNhbXBsZSBub25jZQ==") { channel, _ in
            channel.eventLoop.makeSucceededVoidFuture()
        }
        func response(_ accept: [String]) -> NIOHTTP1.HTTPResponseHead {
            var headers = HTTPHeaders()
            for value in accept { headers.add(name: "Sec-WebSocket-Accept", value: value) }
            return HTTPResponseHead(version: .http1_1, status: .switchingProtocols, headers: headers)
        }
        #expect(upgrader.shouldAllowUpgrade(upgradeResponse: response(["s3pPLMBiTxaQ9kYGzzhZRbK+xOo="])))
        #expect(!upgrader.shouldAllowUpgrade(upgradeResponse: response(["s3pPLMBiTxaQ9kYGzzhZRbK+xOp="])))
        #expect(!upgrader.shouldAllowUpgrade(upgradeResponse: response([])))
        #expect(!upgrader.shouldAllowUpgrade(upgradeResponse: response(["s3pPLMBiTxaQ9kYGzzhZRbK+xOo=", "s3pPLMBiTxaQ9kYGzzhZRbK+xOo="])))
        var headers = HTTPHeaders()
        upgrader.addCustom(upgradeRequestHeaders: &headers)
        #expect(headers["Sec-WebSocket-Key"] == ["dGhlIHNhbXBsZSBub25jZQ=="])
        #expect(headers["Sec-WebSocket-Version"] == ["13"])
    }
}
