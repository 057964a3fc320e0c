import Crypto
#if canImport(FoundationEssentials)
import FoundationEssentials
#else
import Foundation
#endif
import NIOCore
import NIOHTTP1
import NIOWebSocket

/// Encodes client WebSocket frames (RFC 6455 section 5.2) and masks their payload eight bytes at a
/// time. It takes the place of swift-nio's `WebSocketFrameEncoder` on our client channels, whose
/// byte-at-a-time `webSocketMask` was the largest single cost of sending binary messages.
///
/// A masked frame is one buffer, the header followed by a masked copy of the payload (masking the
/// caller's payload in place would copy it: the frame shares it), so a frame is one write. Frames
/// with extension data (no extension we negotiate uses it) are masked the same way, the key running
/// on across both parts.
final class MaskingFrameEncoder: ChannelOutboundHandler, RemovableChannelHandler {
    typealias OutboundIn = WebSocketFrame
    typealias OutboundOut = ByteBuffer

    func write(context: ChannelHandlerContext, data: NIOAny, promise: EventLoopPromise<Void>?) {
        let frame = unwrapOutboundIn(data)
        let extensionData = frame.extensionData
        let payload = frame.data
        let length = (extensionData?.readableBytes ?? 0) + payload.readableBytes
        let headerSize = 2 + (length <= 125 ? 0 : length <= Int(UInt16.max) ? 2 : 8) + (frame.maskKey == nil ? 0 : 4)

        guard let key = frame.maskKey else {
            // Unmasked (never a client's frame on the wire; kept for completeness): the payload is
            // written as it is, after its header.
            var header = context.channel.allocator.buffer(capacity: headerSize)
            Self.writeHeader(frame, length: length, into: &header)
            context.write(wrapOutboundOut(header), promise: nil)
            if let extensionData { context.write(wrapOutboundOut(extensionData), promise: nil) }
            context.write(wrapOutboundOut(payload), promise: promise)
            return
        }
        // The header and the masked payload in one buffer: the payload is shared with the frame the
        // caller passed, so masking it in place would copy it anyway.
        var out = context.channel.allocator.buffer(capacity: headerSize + length)
        Self.writeHeader(frame, length: length, into: &out)
        out.writeBytes(key)
        var offset = 0
        if let extensionData {
            out.writeMasked(extensionData, key: key, offset: 0)
            offset = extensionData.readableBytes
        }
        out.writeMasked(payload, key: key, offset: offset)
        context.write(wrapOutboundOut(out), promise: promise)
    }

    /// The first two bytes and the extended length (RFC 6455 section 5.2), without the masking key.
    private static func writeHeader(_ frame: WebSocketFrame, length: Int, into buffer: inout ByteBuffer) {
        var first = UInt8(webSocketOpcode: frame.opcode)
        if frame.fin { first |= 0x80 }
        if frame.rsv1 { first |= 0x40 }
        if frame.rsv2 { first |= 0x20 }
        if frame.rsv3 { first |= 0x10 }
        writeHeader(first: first, length: length, masked: frame.maskKey != nil, into: &buffer)
    }

    private static func writeHeader(first: UInt8, length: Int, masked: Bool, into buffer: inout ByteBuffer) {
        buffer.writeInteger(first)
        let maskBit: UInt8 = masked ? 0x80 : 0
        switch length {
        case 0...125:
            buffer.writeInteger(UInt8(length) | maskBit)
        case 126...Int(UInt16.max):
            buffer.writeInteger(126 | maskBit)
            buffer.writeInteger(UInt16(length))
        default:
            buffer.writeInteger(127 | maskBit)
            buffer.writeInteger(UInt64(length))
        }
    }

    /// The bytes a whole masked frame with `length` bytes of payload takes on the wire.
    static func maskedFrameSize(payload length: Int) -> Int {
        2 + (length <= 125 ? 0 : length <= Int(UInt16.max) ? 2 : 8) + 4 + length
    }

    /// Appends a whole (final, unfragmented) masked frame of `opcode` carrying `payload`: what
    /// ``write(context:data:promise:)`` writes for such a frame, without the frame value.
    static func writeMaskedFrame(
        opcode: WebSocketOpcode, payload: UnsafeRawBufferPointer, key: WebSocketMaskingKey, into buffer: inout ByteBuffer
    ) {
        writeHeader(first: 0x80 | UInt8(webSocketOpcode: opcode), length: payload.count, masked: true, into: &buffer)
        buffer.writeBytes(key)
        buffer.writeMasked(payload, key: key, offset: 0)
    }
}

extension ByteBuffer {
    /// Masks the readable bytes in place, the key starting at `offset` (mod 4).
    mutating func maskFast(_ key: WebSocketMaskingKey, offset: Int) {
        guard readableBytes > 0 else { return }
        withUnsafeMutableReadableBytes { bytes in
            Self.mask(UnsafeRawBufferPointer(bytes), into: bytes, key: key, offset: offset)
        }
    }

    /// Appends `source`'s readable bytes masked with `key`, the key starting at `offset` (mod 4).
    mutating func writeMasked(_ source: ByteBuffer, key: WebSocketMaskingKey, offset: Int) {
        source.withUnsafeReadableBytes { writeMasked($0, key: key, offset: offset) }
    }

    /// Appends `source` masked with `key`, the key starting at `offset` (mod 4).
    mutating func writeMasked(_ source: UnsafeRawBufferPointer, key: WebSocketMaskingKey, offset: Int) {
        let count = source.count
        guard count > 0 else { return }
        writeWithUnsafeMutableBytes(minimumWritableBytes: count) { destination in
            Self.mask(source, into: UnsafeMutableRawBufferPointer(rebasing: destination[0..<count]), key: key, offset: offset)
            return count
        }
    }

    /// `destination[i] = source[i] ^ key[(i + offset) % 4]`, eight bytes at a time (the two may be
    /// the same memory).
    private static func mask(
        _ source: UnsafeRawBufferPointer, into destination: UnsafeMutableRawBufferPointer, key: WebSocketMaskingKey, offset: Int
    ) {
        let count = source.count
        var word32: UInt32 = 0
        withUnsafeMutableBytes(of: &word32) { raw in
            for index in 0..<4 { raw[index] = key[(index + offset) % 4] }
        }
        let word64 = UInt64(word32) | UInt64(word32) << 32
        var index = 0
        while index + 8 <= count {
            let value = source.loadUnaligned(fromByteOffset: index, as: UInt64.self)
            destination.storeBytes(of: value ^ word64, toByteOffset: index, as: UInt64.self)
            index += 8
        }
        while index < count {
            destination[index] = source[index] ^ key[(index + offset) % 4]
            index += 1
        }
    }
}

final class WebSocketClientUpgrader<UpgradeResult: Sendable>: NIOTypedHTTPClientProtocolUpgrader, Sendable {
    let supportedProtocol = "websocket"
    let requiredUpgradeHeaders: [String] = []
    private let requestKey: String
    private let maxFrameSize: Int
    private let upgradeAccepted: @Sendable () -> Void
    /// Whether swift-nio's frame decoder reads the upgraded connection; false: the pipeline
    /// handler adds a handler that reads the bytes itself (``WebSocketReadHandler``).
    private let decodesFrames: @Sendable (NIOHTTP1.HTTPResponseHead) -> Bool
    private let upgradePipelineHandler: @Sendable (any Channel, NIOHTTP1.HTTPResponseHead) -> EventLoopFuture<UpgradeResult>

    /// `upgradeAccepted` runs on the event loop as soon as a valid 101 is read, before the upgrade.
    init(
        maxFrameSize: Int, requestKey: String = NIOWebSocketClientUpgrader.randomRequestKey(),
        upgradeAccepted: @escaping @Sendable () -> Void = {},
        decodesFrames: @escaping @Sendable (NIOHTTP1.HTTPResponseHead) -> Bool = { _ in true },
        upgradePipelineHandler: @escaping @Sendable (any Channel, NIOHTTP1.HTTPResponseHead) -> EventLoopFuture<UpgradeResult>
    ) {
        self.requestKey = requestKey
        self.maxFrameSize = maxFrameSize
        self.upgradeAccepted = upgradeAccepted
        self.decodesFrames = decodesFrames
        self.upgradePipelineHandler = upgradePipelineHandler
    }

    func addCustom(upgradeRequestHeaders: inout HTTPHeaders) {
        upgradeRequestHeaders.add(name: "Sec-WebSocket-Key", value: requestKey)
        upgradeRequestHeaders.add(name: "Sec-WebSocket-Version", value: "13")
    }

    func shouldAllowUpgrade(upgradeResponse: NIOHTTP1.HTTPResponseHead) -> Bool {
        let accept = upgradeResponse.headers["Sec-WebSocket-Accept"]
        guard accept.count == 1, accept[0] == Self.acceptValue(for: requestKey) else { return false }
        upgradeAccepted()
        return true
    }

    /// The `Sec-WebSocket-Accept` value a server must answer `key` with (RFC 6455 section 4.2.2).
    static func acceptValue(for key: String) -> String {
        let digest = Insecure.SHA1.hash(data: Array((key + "258EAFA5-E914-47DA-95CA-C5AB0DC85B11").utf8))
        return Data(digest).base64EncodedString()
    }

    func upgrade(channel: any Channel, upgradeResponse: NIOHTTP1.HTTPResponseHead) -> EventLoopFuture<UpgradeResult> {
        channel.eventLoop.makeCompletedFuture {
            let pipeline = channel.pipeline.syncOperations
            try pipeline.addHandler(MaskingFrameEncoder())
            guard decodesFrames(upgradeResponse) else { return }
            try pipeline.addHandler(ByteToMessageHandler(WebSocketFrameDecoder(maxFrameSize: maxFrameSize)))
            try pipeline.addHandler(WebSocketProtocolErrorHandler(isServer: false))
        }.flatMap {
            self.upgradePipelineHandler(channel, upgradeResponse)
        }
    }
}
