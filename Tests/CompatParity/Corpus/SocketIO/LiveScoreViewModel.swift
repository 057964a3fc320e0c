// A main-actor view model, the Swift 6 style: the socket delivers on the main queue (the default
// handleQueue), so handlers call main-actor code directly or through MainActor.assumeIsolated.
import Foundation
import SocketIO

struct Score: Equatable {
    var home: Int
    var away: Int
}

@MainActor
final class LiveScoreViewModel {
    private(set) var score = Score(home: 0, away: 0)
    private(set) var status: SocketIOStatus = .notConnected
    private(set) var log: [String] = []
    private let manager: SocketManager
    private let socket: SocketIOClient

    init(url: URL) {
        manager = SocketManager(socketURL: url, config: [.forceWebsockets(true), .reconnects(true), .reconnectAttempts(-1)])
        socket = manager.socket(forNamespace: "/scores")
        socket.on(clientEvent: .statusChange) { [weak self] data, ack in
            guard let status = data.first as? SocketIOStatus else { return }
            MainActor.assumeIsolated {
                self?.status = status
            }
        }
        socket.on("score") { [weak self] data, ack in
            guard let payload = data.first as? [String: Any],
                  let home = payload["home"] as? Int, let away = payload["away"] as? Int else { return }
            self?.apply(Score(home: home, away: away))
        }
        socket.on(clientEvent: .reconnect) { [weak self] data, ack in
            self?.log.append("reconnecting: \(data.first as? String ?? "?")")
        }
        socket.on(clientEvent: .reconnectAttempt) { [weak self] data, ack in
            self?.log.append("attempts left: \(data.first as? Int ?? -1)")
        }
        socket.once(clientEvent: .connect) { [weak self] data, ack in
            self?.log.append("first connect")
        }
    }

    func start() {
        socket.connect(timeoutAfter: 10) { [weak self] in
            self?.log.append("timed out")
        }
    }

    func stop() {
        manager.disconnect()
    }

    private func apply(_ score: Score) {
        self.score = score
    }
}
