// A singleton holding a connection in SwiftSignalRClient style, configured with
// withHubConnectionOptions for a callback queue of its own and hopping to the main queue
// for the UI, with MainActor.assumeIsolated in handlers that run on the default main queue.
import Foundation
import SignalRClient

@MainActor
final class PresenceBadge {
    var count = 0
    func show(_ users: [String]) { count = users.count }
}

// The app touches its state only from the connection's callback queue (workQueue).
final class PresenceTracker: @unchecked Sendable {
    static let shared = PresenceTracker()

    private let workQueue = DispatchQueue(label: "presence.callbacks")
    private var connection: HubConnection?
    private var online: Set<String> = []
    let badge: PresenceBadge

    private init() {
        badge = MainActor.assumeIsolated { PresenceBadge() }
    }

    func start(url: URL) {
        let connection = HubConnectionBuilder(url: url)
            .withHubConnectionOptions { [workQueue] options in
                options.callbackQueue = workQueue
            }
            .withPermittedTransportTypes(.webSockets)
            .withHttpConnectionOptions { options in
                options.skipNegotiation = true
            }
            .build()
        connection.on(method: "Online") { [weak self] (user: String) in
            guard let self else { return }
            self.online.insert(user)
            let users = Array(self.online)
            DispatchQueue.main.async {
                MainActor.assumeIsolated { self.badge.show(users) }
            }
        }
        connection.on(method: "Offline") { [weak self] (user: String, reason: String?) in
            self?.online.remove(user)
            _ = reason
        }
        connection.start()
        self.connection = connection
    }

    func announce(_ user: String) {
        connection?.send(method: "Announce", user, Date().timeIntervalSince1970) { error in
            if let error {
                print("announce failed: \(error)")
            }
        }
    }

    func stop() {
        connection?.stop()
        connection = nil
    }
}

/// A screen whose handlers run on the main queue (the default callback queue).
@MainActor
final class PresenceScreen {
    var title = ""
    private var connection: HubConnection?

    func open(url: URL) {
        let connection = HubConnectionBuilder(url: url).build()
        connection.on(method: "Title") { [weak self] (title: String) in
            MainActor.assumeIsolated { self?.title = title }
        }
        connection.start()
        self.connection = connection
    }
}
