import Foundation
import NIOCore
import NIOPosix
import NIOWebSocket
@testable import RealtimeCore
import Testing

/// A connection reset while the client completes the WebSocket upgrade: the server answers 101 and
/// resets at once. Every connect must end quickly with a typed error. (The upgrade can finish after
/// NIO has already failed its result; `WebSocketClientChannel.UpgradedChannelCustody` then finishes
/// the orphaned channel, which, dropped unfinished, trapped a debug CI run with "Deinited
/// NIOAsyncWriter without calling finish()".)
///
/// Known gap, not covered here: a FIN instead of the reset, under load, sometimes goes unnoticed
/// until the 30 s auto-ping (the half-closure can arrive before the channel is handed over); see
/// Docs/Architecture.md, "WebSocket".
@Suite("WebSocket: the connection is reset during the upgrade", .serialized, .timeLimit(.minutes(2)))
struct WebSocketUpgradeRaceTests {
    @Test("101 then RST, 200 times: every connect ends with a typed error within the connect timeout")
    func upgradeThenReset() async throws {
        let peer = try await UpgradeThenResetPeer.start()
        var codes: [RealtimeError.Code: Int] = [:]
        var opened = 0
        let started = ContinuousClock.now
        for _ in 0..<200 {
            do {
                try await WebSocketTransport.connect(
                    to: "ws://127.0.0.1:\(peer.port)/", configuration: WebSocketConfiguration(connectTimeout: .seconds(5))
                ) { connection in
                    for try await _ in connection.inbound {}
                }
                opened += 1
            } catch let error as RealtimeError {
                codes[error.code, default: 0] += 1
            }
        }
        await peer.stop()
        #expect(codes.values.reduce(0, +) + opened == 200)
        #expect(opened == 0, "a reset connection never ends normally")
        #expect(Set(codes.keys).isSubset(of: [.connectionClosed, .connectFailed]), "\(codes)")
        #expect(ContinuousClock.now - started < .seconds(60))
    }
}

/// Answers the upgrade with 101 and resets the connection (SO_LINGER 0) in the same turn.
final class UpgradeThenResetPeer: Sendable {
    let port: Int
    private let channel: any Channel

    private init(port: Int, channel: any Channel) {
        self.port = port
        self.channel = channel
    }

    static func start() async throws -> UpgradeThenResetPeer {
        let channel = try await ServerBootstrap(group: MultiThreadedEventLoopGroup.singleton)
            .childChannelInitializer { channel in
                channel.eventLoop.makeCompletedFuture { try channel.pipeline.syncOperations.addHandler(UpgradeThenReset()) }
            }
            .bind(host: "127.0.0.1", port: 0).get()
        return UpgradeThenResetPeer(port: channel.localAddress?.port ?? 0, channel: channel)
    }

    func stop() async { try? await channel.close() }

    final class UpgradeThenReset: ChannelInboundHandler {
        typealias InboundIn = ByteBuffer
        typealias OutboundOut = ByteBuffer
        private var request = ""

        func channelRead(context: ChannelHandlerContext, data: NIOAny) {
            request += String(buffer: unwrapInboundIn(data))
            guard request.contains("\r\n\r\n") else { return }
            let key = request.split(separator: "\r\n").first { $0.lowercased().hasPrefix("sec-websocket-key:") }
                .map { String($0.split(separator: ":", maxSplits: 1)[1].trimmingCharacters(in: .whitespaces)) } ?? ""
            let accept = WebSocketClientUpgrader<Void>.acceptValue(for: key)
            let response = "HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Accept: \(accept)\r\n\r\n"
            context.writeAndFlush(wrapOutboundOut(ByteBuffer(string: response)), promise: nil)
            let channel = context.channel
            if let provider = channel as? any SocketOptionProvider {
                provider.setSoLinger(linger(l_onoff: 1, l_linger: 0)).whenComplete { _ in channel.close(promise: nil) }
            } else {
                context.close(promise: nil)
            }
        }
    }
}
