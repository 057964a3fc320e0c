import Foundation
import NIOConcurrencyHelpers
import NIOCore
import NIOPosix
import NIOSSL
@testable import RealtimeCore

/// A raw TCP peer that answers the WebSocket upgrade with 101 and then misbehaves on purpose:
/// `.stall` never reads again (backpressure tests), `.reset` resets the connection (SO_LINGER 0)
/// in the same turn, `.fin` closes it normally in the same turn, `.framesThenFin` sends a text
/// message "bye" and a close frame (1008, "policy") with the 101, in one write, and closes
/// (upgrade-race tests); `.finWithoutAnswer` reads the request and closes without answering;
/// `.answerCloseThenDropTCP` answers the client's close frame and then closes the TCP connection
/// without TLS's close_notify (what nginx does as a TLS-terminating proxy); `.send(bytes)` writes
/// raw frames after the 101 and keeps the connection open, recording the frames the client sends
/// (``clientFrames``) and closing once the client's close frame came.
final class RawUpgradePeer: Sendable {
    enum AfterUpgrade: Sendable { case stall, reset, fin, framesThenFin, finWithoutAnswer, answerCloseThenDropTCP, send([UInt8]) }

    let port: Int
    private let channel: any Channel
    private let received: NIOLockedValueBox<[UInt8]>
    private let accepted: NIOLockedValueBox<(any Channel)?>

    private init(port: Int, channel: any Channel, received: NIOLockedValueBox<[UInt8]>, accepted: NIOLockedValueBox<(any Channel)?>) {
        self.port = port
        self.channel = channel
        self.received = received
        self.accepted = accepted
    }

    /// Bytes the peer's last connection has written that the client has not read yet (they wait in the
    /// peer's channel); nil before a connection.
    var pendingOutboundBytes: Int? {
        guard let child = accepted.withLockedValue({ $0 }) else { return nil }
        return try? child.getOption(ChannelOptions.bufferedWritableBytes).wait()
    }

    /// The frames the client sent after the upgrade, unmasked: (opcode, payload).
    var clientFrames: [(opcode: UInt8, payload: [UInt8])] { Self.frames(in: received.withLockedValue { $0 }) }

    /// The whole frames in `data`, unmasked.
    static func frames(in data: [UInt8]) -> [(opcode: UInt8, payload: [UInt8])] {
        var bytes = data[...]
        var frames: [(opcode: UInt8, payload: [UInt8])] = []
        while bytes.count >= 2 {
            let start = bytes.startIndex
            let opcode = bytes[start] & 0x0F
            var length = Int(bytes[start + 1] & 0x7F)
            var offset = start + 2
            if length == 126, bytes.count >= 4 {
                length = Int(bytes[offset]) << 8 | Int(bytes[offset + 1])
                offset += 2
            } else if length == 127, bytes.count >= 10 {
                length = bytes[offset..<offset + 8].reduce(0) { $0 << 8 | Int($1) }
                offset += 8
            }
            let masked = bytes[start + 1] & 0x80 != 0
            let key = masked ? Array(bytes[offset..<min(offset + 4, bytes.endIndex)]) : []
            if masked { offset += 4 }
            guard offset + length <= bytes.endIndex else { break }
            let payload = bytes[offset..<offset + length].enumerated().map { masked ? $0.element ^ key[$0.offset % 4] : $0.element }
            frames.append((opcode, payload))
            bytes = bytes[(offset + length)...]
        }
        return frames
    }

    /// The code of the client's close frame, if it sent one (nil: none; 1005: one without a code).
    var clientCloseCode: UInt16? {
        guard let close = clientFrames.first(where: { $0.opcode == 8 }) else { return nil }
        return close.payload.count >= 2 ? UInt16(close.payload[0]) << 8 | UInt16(close.payload[1]) : 1005
    }

    /// With `tls`, the peer speaks TLS (wss) and its close sends close_notify before the FIN.
    static func start(then action: AfterUpgrade, tls: TLSConfiguration? = nil) async throws -> RawUpgradePeer {
        let sslContext = try tls.map { try NIOSSLContext(configuration: $0) }
        let received = NIOLockedValueBox<[UInt8]>([])
        let accepted = NIOLockedValueBox<(any Channel)?>(nil)
        let channel = try await ServerBootstrap(group: MultiThreadedEventLoopGroup.singleton)
            .childChannelInitializer { channel in
                channel.eventLoop.makeCompletedFuture {
                    accepted.withLockedValue { $0 = channel }
                    let rawCloser = RawCloser()
                    try channel.pipeline.syncOperations.addHandler(rawCloser)
                    if let sslContext { try channel.pipeline.syncOperations.addHandler(NIOSSLServerHandler(context: sslContext)) }
                    try channel.pipeline.syncOperations.addHandler(Upgrader(action, rawCloser: rawCloser, received: received))
                }
            }
            .bind(host: "127.0.0.1", port: 0).get()
        return RawUpgradePeer(port: channel.localAddress?.port ?? 0, channel: channel, received: received, accepted: accepted)
    }

    func stop() async { try? await channel.close() }

    final class Upgrader: ChannelInboundHandler {
        typealias InboundIn = ByteBuffer
        typealias OutboundOut = ByteBuffer
        private let action: AfterUpgrade
        private let rawCloser: RawCloser
        private let received: NIOLockedValueBox<[UInt8]>
        private var request = ""
        private var upgraded = false

        init(_ action: AfterUpgrade, rawCloser: RawCloser, received: NIOLockedValueBox<[UInt8]>) {
            self.action = action
            self.rawCloser = rawCloser
            self.received = received
        }

        func channelRead(context: ChannelHandlerContext, data: NIOAny) {
            if upgraded, case .send = action {
                // Record what the client sends; its close frame ends the connection (as a server does).
                let bytes = Array(unwrapInboundIn(data).readableBytesView)
                let all = received.withLockedValue { $0.append(contentsOf: bytes); return $0 }
                if RawUpgradePeer.frames(in: all).contains(where: { $0.opcode == 8 }) {
                    let channel = context.channel
                    context.eventLoop.scheduleTask(in: .milliseconds(20)) { channel.close(promise: nil) }
                }
                return
            }
            if upgraded {
                // The client's close frame (opcode 8, masked): answer it, then drop TCP below TLS.
                let bytes = unwrapInboundIn(data)
                if case .answerCloseThenDropTCP = action, bytes.readableBytesView.first == 0x88 {
                    context.writeAndFlush(wrapOutboundOut(ByteBuffer(bytes: [0x88, 0x02, 0x03, 0xE8])), promise: nil)
                    // The next bytes from the client can only be its close_notify: drop TCP then.
                    rawCloser.arm()
                }
                return
            }
            request += String(buffer: unwrapInboundIn(data))
            guard request.contains("\r\n\r\n") else { return }
            if case .finWithoutAnswer = action {
                context.close(promise: nil)
                return
            }
            let key = request.split(separator: "\r\n").first { $0.lowercased().hasPrefix("sec-websocket-key:") }
                .map { String($0.split(separator: ":", maxSplits: 1)[1].trimmingCharacters(in: .whitespaces)) } ?? ""
            let accept = WebSocketClientUpgrader<Void>.acceptValue(for: key)
            let response = "HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Accept: \(accept)\r\n\r\n"
            var bytes = ByteBuffer(string: response)
            if case .send(let frames) = action { bytes.writeBytes(frames) }
            if case .framesThenFin = action {
                bytes.writeBytes([0x81, 3] + Array("bye".utf8))
                bytes.writeBytes([0x88, 8, 0x03, 0xF0] + Array("policy".utf8))
            }
            context.writeAndFlush(wrapOutboundOut(bytes), promise: nil)
            upgraded = true
            let channel = context.channel
            switch action {
            case .answerCloseThenDropTCP, .send:
                break
            case .stall:
                channel.setOption(ChannelOptions.autoRead, value: false).whenComplete { _ in }
            case .fin, .framesThenFin, .finWithoutAnswer:
                context.close(promise: nil)
            case .reset:
                if let provider = channel as? any SocketOptionProvider {
                    provider.setSoLinger(linger(l_onoff: 1, l_linger: 0)).whenComplete { _ in channel.close(promise: nil) }
                } else {
                    context.close(promise: nil)
                }
            }
        }
    }
}

/// First in the peer's pipeline (below TLS): once armed, the next bytes from the client (its TLS
/// close_notify) are not answered: the TCP connection is closed at once, as nginx does.
final class RawCloser: ChannelDuplexHandler, @unchecked Sendable {
    // @unchecked Sendable: used only on its channel's event loop (the upgrader calls it from there).
    typealias InboundIn = ByteBuffer
    typealias OutboundIn = ByteBuffer
    private var armed = false

    func arm() { armed = true }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        guard armed else { return context.fireChannelRead(data) }
        context.close(promise: nil)
    }
}
