import NIOCore
import NIOHTTP1
import NIOPosix
import NIOWebSocket

/// A Socket.IO server for measuring clients, not a test server: WebSocket transport only (no
/// polling, no upgrade), the default namespace only, and one event, `echo`, acknowledged with its
/// arguments. It answers everything one read brought in with one flush, so that a client sending
/// 1,000 emits at a time is not waiting on a server that flushes (and makes a system call) per
/// packet, as the test server in RealtimeTesting does: that server spends about 14 µs of CPU per
/// emit and saturates its core before the client does.
///
/// Speaks Engine.IO 4: the open packet on connect, `40` answered with `40{"sid":...}`, `42<id>[...]`
/// answered with `43<id>[...]` (the event's arguments), client pongs ignored (its ping interval is
/// longer than any run), a close frame answered and the connection closed.
enum SocketIOEchoServer {
    /// Binds 127.0.0.1 on an ephemeral port; returns the channel (its local address has the port).
    static func start(group: any EventLoopGroup = MultiThreadedEventLoopGroup.singleton) async throws -> any Channel {
        try await ServerBootstrap(group: group)
            .serverChannelOption(.backlog, value: 256)
            .serverChannelOption(.socketOption(.so_reuseaddr), value: 1)
            .childChannelOption(.socketOption(.tcp_nodelay), value: 1)
            .childChannelInitializer { channel in
                let upgrader = NIOWebSocketServerUpgrader(
                    maxFrameSize: 1 << 24,
                    shouldUpgrade: { channel, _ in channel.eventLoop.makeSucceededFuture(HTTPHeaders()) },
                    upgradePipelineHandler: { channel, _ in
                        channel.eventLoop.makeCompletedFuture {
                            try channel.pipeline.syncOperations.addHandler(EchoHandler())
                        }
                    })
                return channel.eventLoop.makeCompletedFuture {
                    try channel.pipeline.syncOperations.configureHTTPServerPipeline(
                        withServerUpgrade: (upgraders: [upgrader], completionHandler: { _ in }))
                }
            }
            .bind(host: "127.0.0.1", port: 0)
            .get()
    }

    private final class EchoHandler: ChannelInboundHandler {
        typealias InboundIn = WebSocketFrame
        typealias OutboundOut = WebSocketFrame

        /// Something was written since the last flush.
        private var wrote = false

        /// Added once the upgrade is done, on the open connection: the Engine.IO open packet.
        func handlerAdded(context: ChannelHandlerContext) {
            send(#"0{"sid":"bench","upgrades":[],"pingInterval":300000,"pingTimeout":300000,"maxPayload":100000000}"#, context)
            context.flush()
        }

        func channelRead(context: ChannelHandlerContext, data: NIOAny) {
            let frame = unwrapInboundIn(data)
            switch frame.opcode {
            case .text:
                answer(Array(frame.unmaskedData.readableBytesView), context)
            case .connectionClose:
                let close = WebSocketFrame(fin: true, opcode: .connectionClose, data: context.channel.allocator.buffer(capacity: 0))
                context.writeAndFlush(wrapOutboundOut(close)).assumeIsolated().whenComplete { _ in context.close(promise: nil) }
            case .ping:
                context.write(wrapOutboundOut(WebSocketFrame(fin: true, opcode: .pong, data: frame.unmaskedData)), promise: nil)
                wrote = true
            default:
                break
            }
        }

        func channelReadComplete(context: ChannelHandlerContext) {
            if wrote {
                wrote = false
                context.flush()
            }
            context.fireChannelReadComplete()
        }

        /// `40...` → `40{"sid":...}`; `42<id>["echo",args...]` → `43<id>[args...]`.
        private func answer(_ utf8: [UInt8], _ context: ChannelHandlerContext) {
            guard utf8.count >= 2, utf8[0] == UInt8(ascii: "4") else { return }
            switch utf8[1] {
            case UInt8(ascii: "0"):
                send(#"40{"sid":"bench-socket"}"#, context)
            case UInt8(ascii: "2"):
                var index = 2
                while index < utf8.count, utf8[index] >= UInt8(ascii: "0"), utf8[index] <= UInt8(ascii: "9") { index += 1 }
                guard index > 2, index < utf8.count, utf8[index] == UInt8(ascii: "[") else { return }
                let id = utf8[2..<index]
                // The arguments: what follows the event name's string and its comma.
                var cursor = index + 1
                guard cursor < utf8.count, utf8[cursor] == UInt8(ascii: "\"") else { return }
                cursor += 1
                while cursor < utf8.count, utf8[cursor] != UInt8(ascii: "\"") {
                    cursor += utf8[cursor] == UInt8(ascii: "\\") ? 2 : 1
                }
                cursor += 1
                if cursor < utf8.count, utf8[cursor] == UInt8(ascii: ",") { cursor += 1 }
                var reply = context.channel.allocator.buffer(capacity: utf8.count)
                reply.writeString("43")
                reply.writeBytes(id)
                reply.writeString("[")
                reply.writeBytes(utf8[min(cursor, utf8.count)...])
                context.write(wrapOutboundOut(WebSocketFrame(fin: true, opcode: .text, data: reply)), promise: nil)
                wrote = true
            default:
                break
            }
        }

        private func send(_ text: String, _ context: ChannelHandlerContext) {
            var buffer = context.channel.allocator.buffer(capacity: text.utf8.count)
            buffer.writeString(text)
            context.write(wrapOutboundOut(WebSocketFrame(fin: true, opcode: .text, data: buffer)), promise: nil)
            wrote = true
        }
    }
}
