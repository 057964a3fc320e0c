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
/// The header goes into a small buffer of its own and the masked payload follows, so a frame is two
/// writes that leave in the same `writev`. Frames with extension data (no extension we negotiate
/// uses it) are masked the same way, the key running on across both parts.
final class MaskingFrameEncoder: ChannelOutboundHandler, RemovableChannelHandler {
    typealias OutboundIn = WebSocketFrame
    typealias OutboundOut = ByteBuffer

    func write(context: ChannelHandlerContext, data: NIOAny, promise: EventLoopPromise<Void>?) {
        let frame = unwrapOutboundIn(data)
        var extensionData = frame.extensionData
        var payload = frame.data
        let length = (extensionData?.readableBytes ?? 0) + payload.readableBytes

        var header = context.channel.allocator.buffer(capacity: 14)
        var first = UInt8(webSocketOpcode: frame.opcode)
        if frame.fin { first |= 0x80 }
        if frame.rsv1 { first |= 0x40 }
        if frame.rsv2 { first |= 0x20 }
        if frame.rsv3 { first |= 0x10 }
        header.writeInteger(first)
        let maskBit: UInt8 = frame.maskKey == nil ? 0 : 0x80
        switch length {
        case 0...125:
            header.writeInteger(UInt8(length) | maskBit)
        case 126...Int(UInt16.max):
            header.writeInteger(126 | maskBit)
            header.writeInteger(UInt16(length))
        default:
            header.writeInteger(127 | maskBit)
            header.writeInteger(UInt64(length))
        }
        if let key = frame.maskKey {
            header.writeBytes(key)
            var offset = 0
            if var part = extensionData {
                part.maskFast(key, offset: 0)
                offset = part.readableBytes
                extensionData = part
            }
            payload.maskFast(key, offset: offset)
        }
        context.write(wrapOutboundOut(header), promise: nil)
        if let extensionData { context.write(wrapOutboundOut(extensionData), promise: nil) }
        context.write(wrapOutboundOut(payload), promise: promise)
    }
}

extension ByteBuffer {
    /// XORs the readable bytes with `key`, starting at byte `offset` of the key stream, eight bytes
    /// at a time (the key repeats every four bytes, so a 64-bit word holds it twice).
    mutating func maskFast(_ key: WebSocketMaskingKey, offset: Int) {
        guard readableBytes > 0 else { return }
        let keyBytes = (0..<4).map { key[($0 + offset) % 4] }
        withUnsafeMutableReadableBytes { bytes in
            let count = bytes.count
            var word32: UInt32 = 0
            withUnsafeMutableBytes(of: &word32) { raw in
                for index in 0..<4 { raw[index] = keyBytes[index] }
            }
            let word64 = UInt64(word32) | UInt64(word32) << 32
            var index = 0
            while index + 8 <= count {
                let value = bytes.loadUnaligned(fromByteOffset: index, as: UInt64.self)
                bytes.storeBytes(of: value ^ word64, toByteOffset: index, as: UInt64.self)
                index += 8
            }
            while index < count {
                bytes[index] ^= keyBytes[index % 4]
                index += 1
            }
        }
    }
}

/// The WebSocket side of the HTTP/1.1 upgrade (RFC 6455 section 4): adds the key and version to the
/// request, checks `Sec-WebSocket-Accept`, and installs the frame codec: swift-nio's
/// `WebSocketFrameDecoder` (with the frame size limit) and protocol error handler, and our
/// ``MaskingFrameEncoder``.
final class WebSocketClientUpgrader<UpgradeResult: Sendable>: NIOTypedHTTPClientProtocolUpgrader, Sendable {
    let supportedProtocol = "websocket"
    let requiredUpgradeHeaders: [String] = []
    private let requestKey: String
    private let maxFrameSize: Int
    private let upgradeAccepted: @Sendable () -> Void
    private let upgradePipelineHandler: @Sendable (any Channel, NIOHTTP1.HTTPResponseHead) -> EventLoopFuture<UpgradeResult>

    /// `upgradeAccepted` runs on the event loop as soon as a valid 101 is read, before the upgrade.
    init(
        maxFrameSize: Int, requestKey: String = NIOWebSocketClientUpgrader.randomRequestKey(),
        upgradeAccepted: @escaping @Sendable () -> Void = {},
        upgradePipelineHandler: @escaping @Sendable (any Channel, NIOHTTP1.HTTPResponseHead) -> EventLoopFuture<UpgradeResult>
    ) {
        self.requestKey = requestKey
        self.maxFrameSize = maxFrameSize
        self.upgradeAccepted = upgradeAccepted
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
            try pipeline.addHandler(ByteToMessageHandler(WebSocketFrameDecoder(maxFrameSize: maxFrameSize)))
            try pipeline.addHandler(WebSocketProtocolErrorHandler(isServer: false))
        }.flatMap {
            self.upgradePipelineHandler(channel, upgradeResponse)
        }
    }
}
